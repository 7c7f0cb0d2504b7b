// The system Chromium under puppeteer-core, headless, with the flags a root
// or container run needs (docs/development.md: no sandbox for root).
import puppeteer from "puppeteer-core";

export async function launch() {
  return puppeteer.launch({
    executablePath: process.env.RELAY_CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
           "--no-default-browser-check", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--autoplay-policy=no-user-gesture-required",
           "--password-store=basic"],
  });
}
