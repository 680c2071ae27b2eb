r"""MkDocs hook: search results read math as text, not as TeX source.

The search index (``search/search_index.json``, written by the search plugin) holds
the text of each section, and math there is the TeX that KaTeX typesets on the page:
a result snippet would read ``all \(T\) positions``. After the build, this hook
rewrites every ``\( ... \)`` and ``\[ ... \]`` in the index as plain text (``all T
positions``, ``V × V``, ``e^(loss) ≈ 7.4``). It runs before the offline plugin, which
then inlines the rewritten index into ``search_index.js``.

Registered in mkdocs.yml under ``hooks:``; :func:`tex_to_text` and
:func:`plain_math` are plain Python so they can be unit-tested without MkDocs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

try:  # The hook runs inside MkDocs; the unit tests import it without MkDocs.
    from mkdocs.plugins import event_priority
except ImportError:  # pragma: no cover
    def event_priority(_priority):
        return lambda f: f

SYMBOLS = {
    "times": "×", "cdot": "·", "cdots": "⋯", "ldots": "…", "dots": "…", "approx": "≈",
    "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠", "pm": "±",
    "to": "→", "rightarrow": "→", "leftarrow": "←", "mapsto": "↦", "infty": "∞",
    "sum": "Σ", "prod": "Π", "in": "∈", "partial": "∂", "nabla": "∇", "odot": "⊙",
    "top": "ᵀ", "intercal": "ᵀ", "prime": "′", "mid": "|", "lVert": "‖", "rVert": "‖",
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε",
    "varepsilon": "ε", "eta": "η", "theta": "θ", "lambda": "λ", "mu": "μ", "pi": "π",
    "rho": "ρ", "sigma": "σ", "tau": "τ", "phi": "φ", "varphi": "φ", "omega": "ω",
    "Delta": "Δ", "Sigma": "Σ", "Omega": "Ω",
    "quad": " ", "qquad": " ", ",": " ", ";": " ", ":": " ", "!": "", " ": " ",
    "{": "{", "}": "}", "%": "%", "_": "_", "&": "&", "#": "#", "\\": "; ",
}
# Commands whose argument is shown as it is: \text{loss} -> loss.
TEXT_COMMANDS = {"text", "textrm", "textbf", "textit", "texttt", "mathrm", "mathbf", "mathit",
                 "mathsf", "mathtt", "mathcal", "mathbb", "boldsymbol", "operatorname", "bm",
                 "hat", "bar", "tilde", "vec", "overline", "underline", "mathop"}
# Commands that only size or space things: dropped.
DROPPED = {"left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr",
           "displaystyle", "textstyle", "limits", "nolimits", "tag", "label", "hspace",
           "vspace", "phantom"}
TAKES_ARGUMENT = {"tag", "label", "hspace", "vspace", "phantom"}
MATH_RE = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)


class _Reader:
    """A tiny TeX reader: enough of TeX for the formulas of these pages."""

    def __init__(self, tex: str):
        self.s, self.i = tex, 0

    def group(self) -> str:
        """The next argument: a {...} group or a single token, as text."""
        self.skip_spaces()
        if self.i >= len(self.s):
            return ""
        if self.s[self.i] == "{":
            depth, start = 0, self.i
            while self.i < len(self.s):
                c = self.s[self.i]
                depth += (c == "{") - (c == "}")
                self.i += 1
                if depth == 0:
                    break
            return tex_to_text(self.s[start + 1:self.i - 1])
        if self.s[self.i] == "\\":
            return self.command()
        self.i += 1
        return self.s[self.i - 1]

    def skip_spaces(self) -> None:
        while self.i < len(self.s) and self.s[self.i] == " ":
            self.i += 1

    def command(self) -> str:
        """A control sequence at self.i (the backslash), with its arguments, as text."""
        self.i += 1
        m = re.compile(r"[A-Za-z]+|.", re.DOTALL).match(self.s, self.i)
        if not m:
            return ""
        name = m.group(0)
        self.i = m.end()
        if name in SYMBOLS:
            return SYMBOLS[name]
        if name in DROPPED:
            if name in TAKES_ARGUMENT:
                self.group()
            return ""
        if name in TEXT_COMMANDS:
            return self.group()
        if name in ("frac", "dfrac", "tfrac"):
            num, den = self.group(), self.group()
            return f"{_wrap(num)}/{_wrap(den)}"
        if name == "sqrt":
            return f"√{_wrap(self.group())}"
        if name in ("begin", "end"):
            env = self.group()
            return ("[" if name == "begin" else "]") if "matrix" in env else ""
        return name  # \ln, \exp, \softmax, \max ...: the name reads right


def _wrap(s: str) -> str:
    """Parentheses around what is more than one word or number: (a+b)/2, but x/2."""
    s = s.strip()
    return s if re.fullmatch(r"[\w.′ᵀ]+|\(.*\)", s) else f"({s})"


def tex_to_text(tex: str) -> str:
    """A TeX formula as plain text: ``V \\times V`` -> ``V × V``."""
    r = _Reader(tex)
    out: list[str] = []
    while r.i < len(r.s):
        c = r.s[r.i]
        if c == "\\":
            word = r.command()
            # keep words apart: "\ln V" -> "ln V", "2\ln" -> "2 ln"
            if word.isalpha() and len(word) > 1 and out and out[-1][-1:].isalnum():
                word = " " + word
            out.append(word)
        elif c in "^_":
            r.i += 1
            arg = r.group()
            if c == "^" and arg in ("ᵀ", "′"):  # QK^\top -> QKᵀ
                out.append(arg)
            else:
                out.append(c + (arg if len(arg) <= 1 else _wrap(arg)))
        elif c in "{}":
            r.i += 1
        elif c == "&":
            r.i += 1
            out.append(", ")
        elif c == "~":
            r.i += 1
            out.append(" ")
        else:
            r.i += 1
            out.append(c)
    return re.sub(r"\s+([,;])", r"\1", re.sub(r"\s+", " ", "".join(out))).strip()


def plain_math(text: str) -> str:
    """Every ``\\( ... \\)`` and ``\\[ ... \\]`` of ``text`` rewritten as plain text."""
    return MATH_RE.sub(lambda m: tex_to_text(m.group(1) if m.group(1) is not None
                                             else m.group(2)), text)


def rewrite_index(path: Path) -> int:
    """Rewrite the math of a search_index.json in place; returns the entries changed."""
    data = json.loads(path.read_text(encoding="utf-8"))
    changed = 0
    for doc in data.get("docs", []):
        for key in ("title", "text"):
            if isinstance(doc.get(key), str) and ("\\(" in doc[key] or "\\[" in doc[key]):
                doc[key] = plain_math(doc[key])
                changed += 1
    path.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")),
                    encoding="utf-8")
    return changed


@event_priority(-50)  # after the search plugin wrote the index, before offline inlines it
def on_post_build(config, **kwargs):
    path = Path(config.site_dir) / "search" / "search_index.json"
    if path.is_file():
        rewrite_index(path)
