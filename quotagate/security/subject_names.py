"""A certificate's subject as the broker's principal builder sees it.

`subject_name(cert_der)`: the subject as javax.security.auth.x500.X500Principal.getName() writes it
(RFC 2253): the last RDN first, CN/C/L/ST/O/OU/STREET/DC/UID by keyword and any other attribute as
its dotted OID with the hex of its DER value (emailAddress is `1.2.840.113549.1.9.1=#16...`), and
`,=+<>#;"\\` escaped with a backslash. The mapping rules then apply to it (principal_mapping.py).
"""

from __future__ import annotations

from cryptography import x509
from cryptography.x509.oid import NameOID

# The attributes X500Principal writes by keyword in RFC 2253; any other is OID=#hex.
_RFC2253_KEYWORDS = {
    NameOID.COMMON_NAME: "CN",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.STREET_ADDRESS: "STREET",
    NameOID.DOMAIN_COMPONENT: "DC",
    NameOID.USER_ID: "UID",
}
_ESCAPED = set(',=+<>#;"\\')


def subject_name(cert_der: bytes) -> str:
    """The certificate's subject as the broker's principal builder sees it (RFC 2253)."""
    return rfc2253(x509.load_der_x509_certificate(cert_der).subject)


def rfc2253(name: x509.Name) -> str:
    return ",".join("+".join(_attribute(a) for a in rdn) for rdn in reversed(name.rdns))


def _attribute(attribute: x509.NameAttribute) -> str:
    keyword = _RFC2253_KEYWORDS.get(attribute.oid)
    if keyword is None:
        return f"{attribute.oid.dotted_string}=#{_der_value(attribute).hex()}"
    return f"{keyword}={_escape(str(attribute.value))}"


def _escape(value: str) -> str:
    out = []
    for index, char in enumerate(value):
        if char in _ESCAPED or (char == " " and index in (0, len(value) - 1)):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\{ord(char):02X}")
        else:
            out.append(char)
    return "".join(out)


def _der_value(attribute: x509.NameAttribute) -> bytes:
    value = attribute.value
    content = (
        value if isinstance(value, bytes) else value.encode("utf-16-be" if attribute._type.value == 30 else "utf-8")
    )
    size = len(content)
    length = (
        bytes([size])
        if size < 0x80
        else bytes([0x80 | ((size.bit_length() + 7) // 8)]) + size.to_bytes((size.bit_length() + 7) // 8, "big")
    )
    return bytes([attribute._type.value]) + length + content
