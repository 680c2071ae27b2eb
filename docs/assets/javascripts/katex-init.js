// Typeset the math that pymdownx.arithmatex (generic: true) leaves in the page:
// inline math as <span class="arithmatex">\(...\)</span> and display math as
// <div class="arithmatex">\[...\]</div>. Only those elements are touched, so a
// dollar sign in ordinary text or code is never mistaken for math.
(function () {
  "use strict";

  function typeset(root) {
    if (typeof renderMathInElement !== "function") {
      console.error("KaTeX auto-render is not loaded; math stays as TeX source.");
      return;
    }
    var nodes = root.querySelectorAll(".arithmatex");
    for (var i = 0; i < nodes.length; i++) {
      renderMathInElement(nodes[i], {
        delimiters: [
          { left: "\\(", right: "\\)", display: false },
          { left: "\\[", right: "\\]", display: true }
        ],
        throwOnError: false
      });
    }
  }

  // Material for MkDocs exposes document$, which emits once per page load
  // (and again per page with navigation.instant). Fall back to DOMContentLoaded.
  if (typeof document$ !== "undefined" && document$ && document$.subscribe) {
    document$.subscribe(function () { typeset(document.body); });
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { typeset(document.body); });
  } else {
    typeset(document.body);
  }
})();
