// node play_video.mjs <index.html>: opens a package's viewer page from its
// file:// address, plays every <video> element to its end and prints
// {"videos": [{src, duration, ended, width, height, error}]} on stdout.
import { pathToFileURL } from "node:url";
import { launch } from "./chromium.mjs";

const page_path = process.argv[2];
const browser = await launch();
try {
  const page = await browser.newPage();
  await page.goto(pathToFileURL(page_path).href, { waitUntil: "load" });
  const result = await page.evaluate(async () => {
    const videos = [...document.querySelectorAll("video")];
    return Promise.all(videos.map((v) => new Promise((resolve) => {
      const src = v.currentSrc || v.getAttribute("src") || (v.querySelector("source") || {}).src;
      const done = (ended, error) => resolve({ src, duration: v.duration, ended,
        width: v.videoWidth, height: v.videoHeight, error });
      const timer = setTimeout(() => done(false, "timeout"), 60000);
      v.addEventListener("ended", () => { clearTimeout(timer); done(true, null); });
      v.addEventListener("error", () => { clearTimeout(timer); done(false, String(v.error && v.error.code)); });
      v.muted = true;
      v.playbackRate = 4;
      v.play().catch((e) => { clearTimeout(timer); done(false, String(e)); });
    })));
  });
  console.log(JSON.stringify({ videos: result }));
} finally {
  await browser.close();
}
