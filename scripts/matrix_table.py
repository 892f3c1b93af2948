"""The results table of `make test-matrix` (docs/compatibility.md): one row per test, one column per Kafka.

Reads the JUnit XML files pytest wrote per Kafka variant (build/matrix/VARIANT.xml, then any
VARIANT.*.xml of tests run again, whose results replace the first ones) and prints a Markdown table:
"pass", "FAIL", or "skip" (with the reason in a note below, once per reason).

    python -m scripts.matrix_table build/matrix [3.9.1-zk 3.9.1 4.0.2 4.2.0 4.4.0]
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """{test id: (outcome, skip reason or failure message)} of one JUnit XML file."""
    results: dict[str, tuple[str, str]] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").removeprefix("tests.integration.")
        test = f"{module}::{case.get('name')}"
        skipped = case.find("skipped")
        failure = case.find("failure") if case.find("failure") is not None else case.find("error")
        if failure is not None:
            results[test] = ("FAIL", (failure.get("message") or "")[:120])
        elif skipped is not None:
            results[test] = ("skip", skipped.get("message") or "")
        else:
            results[test] = ("pass", "")
    return results


def table(results: dict[str, dict[str, tuple[str, str]]]) -> str:
    variants = list(results)
    tests = sorted({test for by_test in results.values() for test in by_test})
    reasons: list[str] = []
    lines = ["| test | " + " | ".join(variants) + " |", "| --- |" + " --- |" * len(variants)]
    for test in tests:
        cells = []
        for variant in variants:
            outcome, detail = results[variant].get(test, ("-", ""))
            if outcome == "skip":
                detail = detail.replace(f"Kafka {variant} ", "")  # one note for every version it names
                if detail not in reasons:
                    reasons.append(detail)
                outcome = f"skip ({reasons.index(detail) + 1})"
            cells.append(outcome)
        lines.append(f"| `{test}` | " + " | ".join(cells) + " |")
    totals = []
    for variant, by_test in results.items():
        counted = [outcome for outcome, _ in by_test.values()]
        passed, failed, skipped = (counted.count(outcome) for outcome in ("pass", "FAIL", "skip"))
        totals.append(f"{variant}: {passed} passed, {failed} failed, {skipped} skipped")
    notes = [f"({index}) {reason}" for index, reason in enumerate(reasons, 1)]
    return "\n".join([*lines, "", "; ".join(totals) + ".", "", *notes]) + "\n"


def main(argv: list[str]) -> int:
    folder = Path(argv[0])
    variants = argv[1:] or sorted(path.stem for path in folder.glob("*.xml"))
    results: dict[str, dict[str, tuple[str, str]]] = {}
    for variant in variants:
        for junit in [folder / f"{variant}.xml", *sorted(folder.glob(f"{variant}.*.xml"))]:
            if junit.exists():
                results.setdefault(variant, {}).update(outcomes(junit))
    sys.stdout.write(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
