// Drives the askpass page in headless Chromium: loads it, types the secret, submits, then
// reloads and submits again. Prints one JSON report on stdout.
// Usage: node askpass_page.mjs URL SECRET CHROMIUM (profile directory in $DSH_TEST_PROFILE).
import puppeteer from "puppeteer-core";

const [url, secret, chromium] = process.argv.slice(2);
const origin = new URL(url).origin;
const args = ["--headless=new", "--disable-gpu", "--no-first-run", "--no-default-browser-check"];
// Chromium's own sandbox cannot start as root.
if (process.getuid && process.getuid() === 0) args.push("--no-sandbox");
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args,
  userDataDir: process.env.DSH_TEST_PROFILE,
});
const report = { foreign: [] };
const step = (what) => process.stderr.write(`step: ${what}\n`);
try {
  const page = await browser.newPage();
  const watch = (tab) =>
    tab.on("request", (request) => {
      if (!request.url().startsWith(origin + "/")) report.foreign.push(request.url());
    });
  watch(page);
  page.on("requestfailed", (r) => step(`failed ${r.method()} ${r.failure()?.errorText}`));
  page.on("response", (r) => step(`response ${r.request().method()} ${r.status()}`));
  page.on("console", (m) => step(`console ${m.text()}`));
  const text = () => page.evaluate(() => document.body.innerText);
  step("load");
  const loaded = await page.goto(url, { waitUntil: "load" });
  report.loaded = { status: loaded.status(), text: await text() };
  // A second tab holds the same form, to submit again once the first has answered.
  const stale = await browser.newPage();
  watch(stale);
  const staleLoaded = await stale.goto(url, { waitUntil: "load" });
  report.staleLoaded = { status: staleLoaded.status() };
  step("type");
  await page.bringToFront();
  await page.type("#secret", secret);
  const [submitted] = await Promise.all([
    page.waitForNavigation({ waitUntil: "load" }),
    page.click('button[value="give"]'),
  ]);
  report.submitted = { status: submitted.status(), text: await text() };
  step("reload");
  const reloaded = await page.goto(url, { waitUntil: "load" });
  report.reloaded = { status: reloaded.status(), text: await text() };
  step("resubmit");
  await stale.bringToFront();
  await stale.type("#secret", "second");
  const [resubmitted] = await Promise.all([
    stale.waitForNavigation({ waitUntil: "load" }),
    stale.click('button[value="give"]'),
  ]);
  report.resubmitted = { status: resubmitted.status() };
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(report) + "\n");
