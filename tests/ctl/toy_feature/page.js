// The toy feature's page: the toys in every box.
"use strict";

async function pageToys(page) {
  document.title = "Toys · palace";
  const data = await api("/api/toys");
  page.append(h("h1", {}, "Toys"), h("p", { id: "toy-count" }, `${data.count} toys in ${data.box}`));
}

page("toys", pageToys);
