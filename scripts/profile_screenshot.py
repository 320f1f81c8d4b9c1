"""Helper of scripts/profile_screenshot.sh (which says what it is for).

`profile_screenshot.py capture LOGDIR` with jax_accl's venv, run from outside the checkout;
`profile_screenshot.py shot XPROF_URL OUT.png` with a venv holding playwright.
"""

import glob
import gzip
import json
import os
import sys
import urllib.request


def capture(logdir):
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from xprof.convert import raw_to_tool_data

    import jax_accl

    mesh = jax.make_mesh((8,), ("d",))
    step = jax.jit(
        jax_accl.shard_map(
            lambda x: jax.lax.psum(x, "d"), mesh=mesh, in_specs=P("d"), out_specs=P()
        )
    )
    # 4 MiB of float32 per device.
    x = jax.device_put(jnp.ones((8, 1 << 20), jnp.float32), NamedSharding(mesh, P("d")))
    step(x).block_until_ready()  # compile outside the profile
    with jax.profiler.trace(logdir):
        for _ in range(5):
            step(x).block_until_ready()

    xplane = sorted(glob.glob(os.path.join(logdir, "plugins/profile/*/*.xplane.pb")))[-1]
    data, _ = raw_to_tool_data.xspace_to_tool_data([xplane], "trace_viewer", {})
    events = json.loads(data)["traceEvents"]
    procs = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    names = {}
    for e in events:
        if e.get("ph") == "X":
            names.setdefault(procs.get(e["pid"]), set()).add(e["name"])
    accl_rows = names.get("/device:CUSTOM:jax_accl", set())
    host_ops = {n for n in names.get("/host:CPU", set()) if n.startswith("accl_allreduce")}
    print(xplane)
    print("  /device:CUSTOM:jax_accl:", sorted(accl_rows))
    print("  /host:CPU:", sorted(host_ops))
    if not accl_rows or not host_ops:
        sys.exit("jax_accl's rows are missing from the profile")


WAIT_MODEL = """() => {
  const e = document.querySelector('tf-trace-viewer');
  return !!(e && e._traceViewer && e._traceViewer.model &&
            e._traceViewer.model.getAllProcesses().length);
}"""

# The k-th call: its extent over jax_accl's rows (all devices), and device 0's event of it.
CALLS = """
function accl_calls(e) {
  const pr = e._traceViewer.model.getAllProcesses().find(p => p.name.includes('jax_accl'));
  const calls = [];
  for (const t of Object.values(pr.threads)) {
    const s = t.sliceGroup.slices.filter(s => s.title.startsWith('accl_allreduce'))
                                 .sort((a, b) => a.start - b.start);
    s.forEach((x, k) => {
      const c = calls[k] = calls[k] || {lo: Infinity, hi: -Infinity};
      c.lo = Math.min(c.lo, x.start);
      c.hi = Math.max(c.hi, x.end);
      if (t.name === 'device 0') c.dev0 = x;
    });
  }
  for (const c of calls) { const pad = (c.hi - c.lo) * 0.06; c.lo -= pad; c.hi += pad; }
  return calls;
}
"""

# Host-thread rows come in an arbitrary order (by thread id). Frame the call, after the first,
# whose XLA op (accl_allreduce_..._4MiB.N, wide enough to read) sits on the highest row.
PICK = (
    "() => {"
    + CALLS
    + """
  const e = document.querySelector('tf-trace-viewer');
  const host = e._traceViewer.model.getAllProcesses().find(p => p.name.includes('/host:'));
  const tracks = Array.from(document.getElementsByClassName('thread-track'));
  const calls = accl_calls(e);
  let best = {k: 1, bottom: Infinity};
  calls.forEach((c, k) => {
    for (const t of Object.values(host.threads)) {
      const track = tracks.find(x => x.thread === t);
      if (!track) continue;
      const r = track.getBoundingClientRect();
      for (const s of t.sliceGroup.slices) {
        if (!s.title.startsWith('accl_allreduce_') || s.end < c.lo || s.start > c.hi) continue;
        if (s.duration < 0.15 * (c.hi - c.lo)) continue;
        if (r.bottom < best.bottom || (r.bottom === best.bottom && k > 0 && best.k === 0))
          best = {k, bottom: r.bottom, op: s.title, thread: t.name};
      }
    }
  });
  return best;
}"""
)

ZOOM = (
    "(k) => {"
    + CALLS
    + """
  const e = document.querySelector('tf-trace-viewer');
  const c = accl_calls(e)[k];
  e.currentViewportRange = {min: c.lo, max: c.hi};
  e._initViewport();
  return e.currentViewportRange;
}"""
)

SELECT = (
    "(k) => {"
    + CALLS
    + """
  const e = document.querySelector('tf-trace-viewer');
  const s = k === null ? [] : [accl_calls(e)[k].dev0];
  e._traceViewer.brushingStateController.changeSelectionFromTimeline(new tr.model.EventSet(s));
}"""
)

TRACKS_BOTTOM = """() =>
  document.querySelector('tf-trace-viewer')._traceViewer.trackView.getBoundingClientRect().bottom"""

# The floating mouse-mode widget: to the bottom-right corner, off the device rows.
MOVE_WIDGET = """() => {
  const m = document.querySelector('tf-trace-viewer')._traceViewer.trackView.mouseModeSelector_;
  if (m) m.pos = {x: 100000, y: 100000};
}"""


def wait_for_trace(page):
    for _ in range(240):  # the trace viewer is an iframe that loads the trace itself
        frame = next((f for f in page.frames if "trace_viewer_index.html" in f.url), None)
        if frame and frame.evaluate(WAIT_MODEL):
            return frame
        page.wait_for_timeout(500)
    sys.exit("the trace viewer never loaded the trace")


def shot(base, out):
    from playwright.sync_api import sync_playwright

    def get(route):
        with urllib.request.urlopen(f"{base}/data/plugin/profile/{route}") as r:
            body = r.read()
        return json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)

    run = sorted(get("runs"))[-1]
    host = get(f"hosts?run={run}&tag=trace_viewer@")[0]["hostname"]
    url = f"{base}/data/plugin/profile/trace_viewer@?run={run}&tag=trace_viewer@&host={host}"
    print(url)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"), args=["--no-sandbox"]
        )
        page = browser.new_page(viewport={"width": 1600, "height": 900})
        page.goto(url)
        frame = wait_for_trace(page)
        page.wait_for_timeout(1500)
        page.locator("button", has_text="menu").first.click()  # fold xprof's side panel
        page.wait_for_timeout(1000)
        frame.locator("#expand_all_button").click()  # unfold /host:CPU too
        page.wait_for_timeout(1000)
        pick = frame.evaluate(PICK)
        print("framing call", pick)
        print("viewport (ms):", frame.evaluate(ZOOM, pick["k"]))
        page.wait_for_timeout(4000)  # streaming mode refetches the zoomed range
        # Select device 0's event: the details panel shows its algorithm, bytes and call,
        # unless the panel would then hide the host row picked above.
        frame.evaluate(SELECT, pick["k"])
        page.wait_for_timeout(3000)
        if frame.evaluate(TRACKS_BOTTOM) < pick["bottom"]:
            frame.evaluate(SELECT, None)
            page.wait_for_timeout(2000)
        frame.evaluate(MOVE_WIDGET)
        page.wait_for_timeout(1000)
        page.screenshot(path=out)
        browser.close()
    if os.path.getsize(out) > 400_000:
        from PIL import Image

        Image.open(out).convert("RGB").quantize(256).save(out, optimize=True)
    print(out, os.path.getsize(out), "bytes")


if __name__ == "__main__":
    if sys.argv[1] == "capture":
        capture(sys.argv[2])
    else:
        shot(sys.argv[2], sys.argv[3])
