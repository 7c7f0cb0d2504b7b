// node live_view.mjs: the live view driven in real time for test_console_live_view.py.
// Reads one JSON command a line on standard input and answers one JSON line each:
//   {"op":"open","url":U}                    -> {"state": page state after load}
//   {"op":"colour","rgb":[r,g,b],"timeoutMs":T} -> {"ms": until the canvas corner (5%, 5%) shows rgb, or null,
//                                              "state", "canvas": whether a canvas exists, "seen": last pixel}
//   {"op":"wait_state","want":S,"timeoutMs":T} -> {"state"}
//   {"op":"pointer","x":X,"y":Y}             -> {} (sends a pointer event, take-over or not)
//   {"op":"take"}                            -> {"state"} (clicks "take control")
//   {"op":"give"}                            -> {"state"}
//   {"op":"close"}                           -> {} and exits
import { createInterface } from "node:readline";
import { launch } from "./chromium.mjs";

const browser = await launch();
const page = await browser.newPage();
await page.setViewport({ width: 1280, height: 832 });
page.on("console", (m) => process.stderr.write("console: " + m.text() + "\n"));
page.on("pageerror", (e) => process.stderr.write("pageerror: " + e + "\n"));
const answer = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const state = () => page.evaluate(() => document.body ? document.body.dataset.state || null : null);

async function centre() {
  return page.evaluate(() => {
    const c = document.querySelector("#screen canvas");
    if (!c || !c.width) return null;
    const d = c.getContext("2d").getImageData(Math.floor(c.width * 0.05), Math.floor(c.height * 0.05), 1, 1).data;
    return [d[0], d[1], d[2]];
  });
}

const near = (a, b) => a && a.every((v, i) => Math.abs(v - b[i]) <= 16);

for await (const line of createInterface({ input: process.stdin })) {
  const cmd = JSON.parse(line);
  try {
    if (cmd.op === "open") {
      await page.goto(cmd.url, { waitUntil: "load" });
      answer({ state: await state() });
    } else if (cmd.op === "colour") {
      const t0 = Date.now();
      let seen = null, ms = null;
      while (Date.now() - t0 < cmd.timeoutMs) {
        seen = await centre();
        if (near(seen, cmd.rgb)) { ms = Date.now() - t0; break; }
        await new Promise((r) => setTimeout(r, 10));
      }
      const canvas = await page.evaluate(() => !!document.querySelector("#screen canvas"));
      answer({ ms, seen, canvas, state: await state() });
    } else if (cmd.op === "wait_state") {
      const t0 = Date.now();
      let s = await state();
      while (s !== cmd.want && Date.now() - t0 < cmd.timeoutMs) {
        await new Promise((r) => setTimeout(r, 50));
        s = await state();
      }
      answer({ state: s });
    } else if (cmd.op === "pointer") {
      // What a page script could do without the person's click: lift noVNC's own view-only
      // switch and send a pointer event. The bridge must still hold it back.
      await page.evaluate((x, y) => {
        const rfb = window.relayRfb;
        const was = rfb.viewOnly;
        rfb.viewOnly = false;
        rfb._sendMouse(x, y, 0);
        rfb.viewOnly = was;
      }, cmd.x, cmd.y);
      answer({});
    } else if (cmd.op === "take" || cmd.op === "give") {
      await page.click(cmd.op === "take" ? "#take" : "#give");
      await new Promise((r) => setTimeout(r, 300));
      answer({ state: await state() });
    } else if (cmd.op === "shot") {
      await page.screenshot({ path: cmd.path });
      answer({});
    } else if (cmd.op === "close") {
      answer({});
      break;
    }
  } catch (e) {
    answer({ error: String(e) });
  }
}
await browser.close().catch(() => {});
process.exit(0);
