// lookout /me: the live preview of the new-watch form. While the person
// types, the form is sent as a Preview (the same POST as the button:
// control.DryRun over the stored history, nothing saved) and the answer's
// preview and problems replace the page's. Without JavaScript the Preview
// button does the same.
(function () {
  "use strict";
  var form = document.querySelector("form.new");
  if (!form || !window.fetch || !window.DOMParser) {
    return;
  }
  var timer = null;
  var seq = 0;
  function swap(doc, id, before) {
    var old = document.getElementById(id);
    var next = doc.getElementById(id);
    if (old) {
      old.remove();
    }
    if (next) {
      before.parentNode.insertBefore(document.importNode(next, true), before.nextSibling);
    }
  }
  function preview() {
    if (!form.elements.name.value || !form.elements.source.value) {
      return;
    }
    var data = new FormData(form);
    data.set("do", "preview");
    var mine = ++seq;
    fetch(form.action, { method: "POST", body: new URLSearchParams(data), credentials: "same-origin" })
      .then(function (resp) { return resp.text(); })
      .then(function (html) {
        if (mine !== seq) {
          return; // a newer preview is on its way
        }
        var doc = new DOMParser().parseFromString(html, "text/html");
        swap(doc, "preview-result", form);
        swap(doc, "problems", form);
        form.setAttribute("data-previewed", String(mine));
      })
      .catch(function () { /* the button still works */ });
  }
  form.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(preview, 500);
  });
  form.addEventListener("change", function () {
    clearTimeout(timer);
    timer = setTimeout(preview, 100);
  });
})();
