"""Which benchmark libraries the sandbox can import: the declared environment of code verdicts (issue 20).

A BigCodeBench task is judged with its libraries importable, as BigCodeBench judges it; a task whose library is
missing is an ``error`` naming it (``codecheck.missing_libraries``), never a wrong answer. The set is declared
once, as the ``bigcodebench`` extra in pyproject.toml (distribution names), and here as the import names its
tasks use (every library the released tasks import, not only those of the sample in tasks/fixtures).
``conductor verify --layers`` prints which of them import here. The sandbox binds this Python installation and
its environment read-only, so what the host can find is what a candidate can import.
"""

from __future__ import annotations

import importlib.util

# Import names used by BigCodeBench's tasks and tests, most used first (counted on the sample).
BIGCODEBENCH = (
    "pandas numpy matplotlib sklearn scipy seaborn requests pytz faker bs4 nltk PIL dateutil keras django folium "
    "flask cv2 wordcloud flask_login wtforms flask_mail blake3 texttable cryptography rsa docx lxml wikipedia "
    "flask_wtf werkzeug skimage geopy geopandas shapely mechanize psutil natsort prettytable yaml statsmodels "
    "openpyxl xlwt"
).split()


def importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def report(names: tuple[str, ...] | list[str] = tuple(BIGCODEBENCH)) -> tuple[list[str], list[str]]:
    """(importable, missing) among ``names``."""
    found = [n for n in names if importable(n)]
    return found, [n for n in names if n not in found]


def describe() -> str:
    found, missing = report()
    tail = f"; missing: {', '.join(missing)}" if missing else ""
    return (
        f"benchmark libraries (bigcodebench): {len(found)} of {len(found) + len(missing)} importable{tail}"
        " (install: pip install 'conductor[bigcodebench]')"
    )
