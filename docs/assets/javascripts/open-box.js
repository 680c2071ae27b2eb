// A link to a depth box points at an anchor just above it (<a id="presets"></a>, in a
// paragraph of anchors only): open the box, so that following the link shows what it
// names instead of a closed box. On load and on every in-page link.
(function () {
  "use strict";

  function openBoxAt(hash) {
    var id = decodeURIComponent((hash || "").slice(1));
    var anchor = id && document.getElementById(id);
    if (!anchor || anchor.tagName !== "A" || !anchor.parentElement) return;
    var holder = anchor.parentElement;  // the <p> of anchors
    if (holder.textContent.trim() !== "") return;  // an anchor in running text: leave it
    var box = holder.nextElementSibling;
    if (box && box.tagName === "DETAILS" && !box.open) {
      box.open = true;
      anchor.scrollIntoView();
    }
  }

  window.addEventListener("hashchange", function () { openBoxAt(location.hash); });
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { openBoxAt(location.hash); });
  } else {
    openBoxAt(location.hash);
  }
})();
