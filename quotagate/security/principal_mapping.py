"""Kafka's `ssl.principal.mapping.rules`: from a client certificate's subject (subject_names.py) to a
user name; the same rules name tenants' members (quotas/tenants.py). No cryptography here: the
quota engine imports it, and Spark's executors run that engine with pandas and pyarrow alone.

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
