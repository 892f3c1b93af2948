"""Kafka's `ssl.principal.mapping.rules`: from a client certificate's subject to a user name.

Two pieces, each as the broker has it:
- `subject_name(cert_der)`: the subject as javax.security.auth.x500.X500Principal.getName() writes it
  (RFC 2253): the last RDN first, CN/C/L/ST/O/OU/STREET/DC/UID by keyword and any other attribute
  as its dotted OID with the hex of its DER value (emailAddress is `1.2.840.113549.1.9.1=#16...`),
  and `,=+<>#;"\\` escaped with a backslash.
- `PrincipalMapper`: the rules, `RULE:pattern/replacement/[LU]` and `DEFAULT`, separated by commas,
  split and parsed as Kafka's SslPrincipalMapper does. A RULE applies when its pattern matches the
  whole subject; the result is the subject with every match replaced (`$1` names a group; a group
  number beyond the pattern's is literal text), lower- or upper-cased with L or U. The first rule
  that applies wins; when none does, the client has no principal (the broker refuses such a
  handshake; the proxy closes such a connection).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import NameOID

_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
DEFAULT_RULES = "DEFAULT"


class NoMatchingRule(ValueError):
    """No mapping rule applies to a subject."""


@dataclass(frozen=True)
class MappingRule:
    pattern: re.Pattern[str] | None  # None: DEFAULT, the subject as it is
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, subject: str) -> str | None:
        if self.pattern is None:
            return subject
        if self.pattern.fullmatch(subject) is None:
            return None
        groups = self.pattern.groups
        result = self.pattern.sub(lambda match: _expand(self.replacement, match, groups), subject)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result

    def fixed_result(self) -> str | None:
        """What the rule gives a subject it matches once when its replacement names no group (the same
        for every such subject); None when the result depends on the subject."""
        if self.pattern is None or (self.pattern.groups and "$" in self.replacement):
            return None
        result = _expand(self.replacement, None, 0)  # type: ignore[arg-type]  # no group: no match read
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return f"RULE:{self.pattern.pattern}/{self.replacement}" + (f"/{self.case}" if self.case else "")


class PrincipalMapper:
    def __init__(self, rules: str = DEFAULT_RULES) -> None:
        """Raises ValueError naming the rule that cannot be parsed."""
        self.rules = [rule for text in split_rules(rules) if (rule := parse_rule(text)) is not None]

    def name(self, subject: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(subject)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"no rule applies to {subject!r} (rules: {', '.join(map(str, self.rules))})")

    def __str__(self) -> str:
        return "[" + ", ".join(map(str, self.rules)) + "]"


def split_rules(rules: str) -> list[str]:
    return [match.group(1) for match in _RULE_SPLITTER.finditer(rules.strip())]


def parse_rule(text: str) -> MappingRule | None:
    """One rule, or None for an empty one (ignored, as in Kafka)."""
    match = _RULE_PARSER.match(text)
    if match is None or match.end() != len(text):
        raise ValueError(f"invalid rule: {text!r}")
    if match.group(1) is not None:
        return MappingRule(None)
    if match.group(2) is None:
        return None
    try:
        pattern = re.compile(match.group(2))
    except re.error as exc:
        raise ValueError(f"invalid rule: {text!r}: {exc}") from exc
    return MappingRule(pattern, match.group(4), match.group(6))


def _expand(replacement: str, match: re.Match[str], groups: int) -> str:
    """A Java replacement string (`$n` group references, `\\x` a literal x) for one match."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
            continue
        if char == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit() and groups > 0:
            # The longest number that names a group ($12 is group 1 then "2" with fewer than 12).
            j = i + 2
            number = int(replacement[i + 1])
            while j < len(replacement) and replacement[j].isdigit() and number * 10 + int(replacement[j]) <= groups:
                number = number * 10 + int(replacement[j])
                j += 1
            if 0 < number <= groups or replacement[i + 1] == "0":
                out.append(match.group(number) or "")
                i = j
                continue
        out.append(char)
        i += 1
    return "".join(out)


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
