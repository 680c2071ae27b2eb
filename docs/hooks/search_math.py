r"""MkDocs hook: search results read math as text, not as TeX source. The search index holds the
pages' math as the TeX that KaTeX typesets (a result would read ``all \(T\) positions``); after the
build, before the offline plugin inlines the index, each ``\( ... \)`` and ``\[ ... \]`` there
becomes plain text: ``all T positions``, ``V × V``, ``(e^z_i)/(Σ_j e^z_j)``."""

import json
import re
from pathlib import Path

from mkdocs.plugins import event_priority

SYMBOLS = dict(pair.split("=", 1) for pair in re.findall(r"\S+", """
    times=× cdot=· cdots=⋯ ldots=… dots=… approx=≈ sim=∼ le=≤ leq=≤ ge=≥ geq=≥ ne=≠ neq=≠ pm=± in=∈
    to=→ rightarrow=→ Longrightarrow=⟹ leftarrow=← mapsto=↦ infty=∞ sum=Σ prod=Π partial=∂ nabla=∇
    odot=⊙ top=ᵀ intercal=ᵀ prime=′ mid=| lVert=‖ rVert=‖ lfloor=⌊ rfloor=⌋ alpha=α beta=β gamma=γ
    delta=δ epsilon=ε varepsilon=ε eta=η theta=θ lambda=λ mu=μ pi=π rho=ρ sigma=σ tau=τ phi=φ
    varphi=φ omega=ω Delta=Δ Sigma=Σ Omega=Ω Phi=Φ Pi=Π""")) | {  # and spaces; other names read as themselves: \ln, \max, \{
    "quad": " ", "qquad": " ", ",": " ", ";": " ", ":": " ", "!": "", " ": " ", "\\": "; "}
SHOWN = set(re.findall(r"\S+", "text textrm textbf textit texttt mathrm mathbf mathit mathsf mathtt "
                       "mathcal mathbb boldsymbol operatorname bm hat bar tilde vec overline "
                       "underline mathop"))  # \text{x} -> x
HIDDEN = {"tag", "label", "hspace", "vspace", "phantom"}  # \tag{1} -> nothing
DROPPED = set(re.findall(r"\S+", "left right big Big bigg Bigg bigl bigr Bigl Bigr displaystyle "
                         "textstyle limits nolimits"))  # they only size or space things: dropped
TOKEN_RE = re.compile(r"\\[A-Za-z]+|\\.|[^\\]", re.DOTALL)  # a command, an escaped or a plain character
MATH_RE = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)

def _wrap(text: str) -> str:  # parentheses around more than one word or number: (a+b)/2, but x/2
    return text if re.fullmatch(r"[\w.′ᵀ]+|\(.*\)", text) else f"({text})"

def _argument(tokens: list[str]) -> str:
    """The next argument, a {...} group or one token, as text (taken off the reversed tokens)."""
    while tokens[-1:] == [" "]:
        tokens.pop()
    token = tokens.pop() if tokens else ""
    if token != "{":
        return _command(token[1:], tokens) if token.startswith("\\") else token
    group, depth = [], 1
    while tokens and (depth := depth + {"{": 1, "}": -1}.get(tokens[-1], 0)):
        group.append(tokens.pop())
    del tokens[-1:]  # the closing brace
    return tex_to_text(group[::-1])

def _command(name: str, tokens: list[str]) -> str:
    """A control sequence (its name without the backslash) with its arguments, as text."""
    if name in ("frac", "dfrac", "tfrac"):
        return f"{_wrap(_argument(tokens))}/{_wrap(_argument(tokens))}"
    if name == "sqrt":
        return f"√{_wrap(_argument(tokens))}"
    if name in ("begin", "end"):  # a matrix is a list of rows: [1, 0; 0, 1]
        return ("[" if name == "begin" else "]") if "matrix" in _argument(tokens) else ""
    if name in SHOWN or name in HIDDEN:  # \text{x} -> x, \tag{1} -> nothing
        return _argument(tokens) if name in SHOWN else _argument(tokens)[:0]
    return "" if name in DROPPED else SYMBOLS.get(name, name)  # \ln, \max: the name reads right

def tex_to_text(tex: str | list[str]) -> str:
    """A TeX formula (or its tokens, reversed) as plain text: ``V \\times V`` -> ``V × V``."""
    tokens = tex if isinstance(tex, list) else TOKEN_RE.findall(tex)[::-1]
    out: list[str] = []
    while tokens:
        token = tokens.pop()
        if token.startswith("\\"):  # words kept apart: 2\ln x -> 2 ln x
            word = _command(token[1:], tokens)
            apart = len(word) > 1 and word.isalpha() and out and out[-1][-1:].isalnum()
            out.append(f" {word}" if apart else word)
        elif token in ("^", "_"):  # e^{2} -> e^2, e^{2x} -> e^(2x), Q K^\top -> Q Kᵀ
            arg = _argument(tokens)
            out.append(arg if token + arg in ("^ᵀ", "^′") else token + (arg if len(arg) <= 1 else _wrap(arg)))
        else:
            out.append({"{": "", "}": "", "&": ", ", "~": " "}.get(token, token))
    return re.sub(r"\s+([,;])", r"\1", re.sub(r"\s+", " ", "".join(out))).strip()

def plain_math(text: str) -> str:
    """Every ``\\( ... \\)`` and ``\\[ ... \\]`` of ``text`` rewritten as plain text."""
    return MATH_RE.sub(lambda m: tex_to_text(m[1] or m[2]), text)

def rewrite_index(path: Path) -> int:
    """Rewrite the math of a search_index.json in place; returns the entries changed."""
    data = json.loads(path.read_text(encoding="utf-8"))
    found = [(doc, key) for doc in data.get("docs", []) for key in ("title", "text")
             if isinstance(doc.get(key), str) and MATH_RE.search(doc[key])]
    for doc, key in found:
        doc[key] = plain_math(doc[key])
    path.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    return len(found)

@event_priority(-50)  # after the search plugin wrote the index, before offline inlines it
def on_post_build(config, **kwargs) -> None:
    if (path := Path(config.site_dir) / "search" / "search_index.json").is_file():
        rewrite_index(path)
