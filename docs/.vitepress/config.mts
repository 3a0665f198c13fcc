// The manual's site, built by VitePress from the Markdown in docs/ (make
// docs-site). Plain data only: the config imports nothing, so it loads from
// docs/ while VitePress itself is installed in tools/docs-site.
const guide = [
  ["Using the API", "/guide/using-the-api"],
  ["Worlds", "/guide/worlds"],
  ["Keys and scopes", "/guide/keys-and-scopes"],
  ["Users and permissions", "/guide/users-and-permissions"],
  ["Event streams", "/guide/event-streams"],
  ["Files", "/guide/files"],
  ["Encounters", "/guide/encounters"],
  ["Fifth-edition operations", "/guide/fifth-edition"],
  ["Rules notes", "/guide/rules-notes"],
  ["Scripts", "/guide/scripts"],
  ["In a browser", "/guide/browser"],
  ["Linked tabletops", "/guide/linked-tabletops"],
  ["Clients", "/guide/clients"],
  ["Accounts", "/guide/accounts"],
];
const operations = [
  ["Configuration", "/operations/configuration"],
  ["Running a cluster", "/operations/cluster"],
  ["Security", "/operations/security"],
  ["Metrics and logs", "/operations/metrics-and-logs"],
  ["Backups and upgrades", "/operations/backups-and-upgrades"],
  ["Crash safety", "/operations/crash-safety"],
  ["Containers and systemd", "/operations/containers-and-systemd"],
];
const reference = [
  ["Overview", "/reference/"],
  ["API", "/reference/api"],
  ["Command line", "/reference/cli"],
  ["Configuration", "/reference/configuration"],
  ["Metrics", "/reference/metrics"],
];
const development = [
  ["Architecture", "/development/architecture"],
  ["How it is built", "/development/how-it-is-built"],
  ["The contract and its tools", "/development/contract"],
  ["Releasing", "/development/releasing"],
  ["Performance", "/development/performance"],
];
const items = (list) => list.map(([text, link]) => ({ text, link }));

export default {
  title: "relay",
  description: "An API in front of virtual tabletop worlds",
  lang: "en",
  // Every internal link must lead to a page; make docs-site also checks
  // every anchor in the built pages.
  ignoreDeadLinks: false,
  lastUpdated: false,
  themeConfig: {
    search: { provider: "local" },
    nav: [
      { text: "Guide", link: "/guide/using-the-api" },
      { text: "Operations", link: "/operations/configuration" },
      { text: "Reference", link: "/reference/" },
      { text: "Development", link: "/development/architecture" },
    ],
    sidebar: [
      { text: "Guide", items: items(guide) },
      { text: "Operations", items: items(operations) },
      { text: "Reference", items: items(reference) },
      { text: "Development", items: items(development) },
    ],
    outline: { level: [2, 3] },
  },
};
