// Checks every link of the built manual: each link to a page of the site
// must lead to a page that was built, and each anchor to an id on that page.
// It also checks the README's links into docs/, which GitHub renders but the
// site does not contain. VitePress itself fails the build on a link to a
// missing page; this adds the anchors and the README.
//
// Usage: node check-links.mjs DIST_DIR README.md
import fs from "node:fs";
import path from "node:path";

const [dist, readme] = process.argv.slice(2);
if (!dist || !readme) {
  console.error("usage: node check-links.mjs DIST_DIR README.md");
  process.exit(2);
}

const pages = new Map(); // "/guide/files.html" -> {ids, hrefs}
function walk(dir) {
  for (const name of fs.readdirSync(dir)) {
    const file = path.join(dir, name);
    if (fs.statSync(file).isDirectory()) {
      if (name !== "assets") walk(file);
    } else if (name.endsWith(".html")) {
      const html = fs.readFileSync(file, "utf8");
      const route = "/" + path.relative(dist, file).split(path.sep).join("/");
      const ids = new Set([...html.matchAll(/\sid="([^"]*)"/g)].map((m) => decode(m[1])));
      const hrefs = [...html.matchAll(/<a\s[^>]*href="([^"]*)"/g)].map((m) => decode(m[1]));
      pages.set(route, { ids, hrefs });
    }
  }
}

function decode(s) {
  return s.replace(/&amp;/g, "&").replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&lt;/g, "<").replace(/&gt;/g, ">");
}

// target returns the page a site path names, as VitePress serves it.
function target(p) {
  if (p === "" || p.endsWith("/")) p += "index.html";
  if (!p.endsWith(".html")) p += ".html";
  return p;
}

const broken = [];
function check(from, href, base) {
  if (/^[a-z][a-z0-9+.-]*:/i.test(href) || href.startsWith("//")) return; // another site
  const [rawPath, anchor] = href.split("#", 2);
  let route = base;
  if (rawPath !== "") route = target(rawPath.startsWith("/") ? rawPath : path.posix.join(path.posix.dirname(base), rawPath));
  const page = pages.get(route);
  if (!page) {
    if (!fs.existsSync(path.join(dist, route))) broken.push(`${from}: ${href}: no page ${route}`);
    return;
  }
  if (anchor && !page.ids.has(decodeURIComponent(anchor))) broken.push(`${from}: ${href}: no anchor #${anchor} on ${route}`);
}

walk(dist);
if (pages.size === 0) {
  console.error(`no page found in ${dist}`);
  process.exit(1);
}
let links = 0;
for (const [route, page] of pages) {
  for (const href of page.hrefs) {
    links++;
    check(route, href, route);
  }
}

// The README's links into the manual: docs/x/y.md#a is /x/y.html#a.
const text = fs.readFileSync(readme, "utf8");
for (const m of text.matchAll(/\]\((docs\/[^)\s]*)\)/g)) {
  links++;
  const [file, anchor] = m[1].split("#", 2);
  const route = "/" + file.replace(/^docs\//, "").replace(/\.md$/, ".html").replace(/(^|\/)index\.html$/, "$1index.html");
  check("README.md", route + (anchor ? "#" + anchor : ""), "/index.html");
}

if (broken.length > 0) {
  console.error(`${broken.length} broken link(s):\n` + broken.join("\n"));
  process.exit(1);
}
console.log(`checked ${links} links on ${pages.size} pages: none broken`);
