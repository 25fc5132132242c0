#!/usr/bin/env python3
"""The benchmarks' result files and their plots: SVG line and bar charts written with Python's
standard library only.

    python3 bench/plot.py                        draw every plot of bench/results/*.json again
    python3 bench/plot.py bench/results/X.json   only the plots of these files

A result file, bench/results/<benchmark>.json, is written by its bench script through
record() at the end of its run: one entry per part of the benchmark, each with the date,
command, machine and commit (`git rev-parse --short HEAD`) of the run that measured it, and
the plots drawn from the parts. A run that measured only some parts (`--only`, `--configs`)
replaces those and keeps the others, so every part says when it was measured:

    {"benchmark": "offload", "script": "bench/run.py",
     "parts": {"bandwidth": {"date": "2026-11-25 23:22 UTC", "command": "python3 bench/run.py",
                             "machine": "2 cores, ...", "commit": "8cc84aa", "data": {...}}},
     "plots": [{"chart": "bandwidth", "parts": ["bandwidth", "small_updates"],
                "output": "bandwidth.svg"}]}

A part with a "source" field was copied from BENCHMARKS.md, not written by a run of the
script. Plots go to docs/img/ (their "output" is a file name there). Charts: see CHARTS at the
end of this file. BENCH_RESULTS_DIR and BENCH_IMG_DIR move both directories (for tests).
"""
import html
import json
import math
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.environ.get("BENCH_RESULTS_DIR") or os.path.join(ROOT, "bench", "results")
IMG = os.environ.get("BENCH_IMG_DIR") or os.path.join(ROOT, "docs", "img")

# ---------------------------------------------------------------- the result files


def machine():
    """This machine, as the result files describe it."""
    try:
        mem = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    except (ValueError, OSError):
        mem = "? GiB"
    distro = ""
    try:
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                distro = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    try:
        mpi = subprocess.run(["mpirun", "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        mpi = "no mpirun"
    return f"{os.cpu_count()} cores, {mem}, Linux {platform.release()}, {distro}, {mpi}"


def commit():
    """`git rev-parse --short HEAD`, with "+changes" when tracked files differ from it."""
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + ("+changes" if dirty else "")


def now():
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def record(benchmark, script, command, parts, plots=(), date=None):
    """Write the parts a run measured into bench/results/<benchmark>.json (keeping the parts it
    did not measure), then draw the file's plots. Never raises: a benchmark that ran for an
    hour must still print its report if the file cannot be written."""
    try:
        path = os.path.join(RESULTS, f"{benchmark}.json")
        doc = {"benchmark": benchmark, "script": script, "parts": {}, "plots": []}
        if os.path.exists(path):
            with open(path) as f:
                doc = json.load(f)
        stamp = {"date": date or now(), "command": command, "machine": machine(), "commit": commit()}
        for name, data in parts.items():
            doc["parts"][name] = dict(stamp, data=data)
        outputs = {p["output"] for p in plots}
        doc["plots"] = [p for p in doc.get("plots", []) if p["output"] not in outputs] + list(plots)
        os.makedirs(RESULTS, exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(path + ".tmp", path)
        print(f"plot: wrote {os.path.relpath(path, ROOT)}", file=sys.stderr)
        render_file(path)
    except Exception as e:  # noqa: BLE001 (see the docstring)
        print(f"plot: could not record {benchmark}: {e!r}", file=sys.stderr)


def render_file(path):
    """Draw every plot of one result file; returns the files written."""
    with open(path) as f:
        doc = json.load(f)
    written = []
    for p in doc.get("plots", []):
        missing = [x for x in p.get("parts", [p.get("part")]) if x not in doc["parts"]]
        if missing:
            print(f"plot: {p['output']}: {os.path.basename(path)} has no part {missing}", file=sys.stderr)
            continue
        out = os.path.join(IMG, p["output"])
        try:
            svg = CHARTS[p["chart"]](doc, p, out)
        except Exception as e:  # noqa: BLE001: one broken plot must not stop the others
            print(f"plot: {p['output']}: {e!r}", file=sys.stderr)
            continue
        if svg is not None:
            os.makedirs(IMG, exist_ok=True)
            with open(out, "w") as f:
                f.write(svg)
        if os.path.exists(out):
            written.append(out)
            print(f"plot: wrote {os.path.relpath(out, ROOT)}", file=sys.stderr)
    return written


def caption(doc, names):
    """Where a plot's numbers come from: file, part, date, command, and whether copied."""
    seen = []
    for n in names:
        part = doc["parts"][n]
        s = f"run of {part['date']}, `{part['command']}`" + (f", build {part['commit']}" if part.get("commit") else "")
        if part.get("source"):
            s += " (copied from BENCHMARKS.md)"
        if s not in seen:
            seen.append(s)
    return f"bench/results/{doc['benchmark']}.json: " + "; ".join(seen)


# ---------------------------------------------------------------- SVG drawing

FONT = "DejaVu Sans, Arial, Helvetica, sans-serif"


def esc(s):
    return html.escape(str(s), quote=True)


def text_width(s, size):
    return 0.58 * size * len(str(s))


class Svg:
    def __init__(self, width, height):
        self.width, self.height, self.items = width, height, []

    def line(self, x1, y1, x2, y2, color="#000", width=1.0, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.items.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" stroke-width="{width}"{d}/>')

    def rect(self, x, y, w, h, fill, stroke=None, opacity=None):
        s = f' stroke="{stroke}"' if stroke else ""
        o = f' fill-opacity="{opacity}"' if opacity is not None else ""
        self.items.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" fill="{fill}"{s}{o}/>')

    def polyline(self, pts, color, width=2.0, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        p = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        self.items.append(f'<polyline points="{p}" fill="none" stroke="{color}" stroke-width="{width}" stroke-linejoin="round"{d}/>')

    def marker(self, x, y, color, shape="circle", r=3.2):
        if shape == "none":  # a line without dots
            return
        if shape == "square":
            self.rect(x - r, y - r, 2 * r, 2 * r, color)
        elif shape == "diamond":
            self.items.append(f'<polygon points="{x:.1f},{y - r * 1.3:.1f} {x + r * 1.3:.1f},{y:.1f} {x:.1f},{y + r * 1.3:.1f} {x - r * 1.3:.1f},{y:.1f}" fill="{color}"/>')
        else:
            self.items.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{color}"/>')

    def text(self, x, y, s, size=12, anchor="start", color="#222", weight=None, rotate=None):
        w = f' font-weight="{weight}"' if weight else ""
        t = f' transform="rotate({rotate} {x:.1f} {y:.1f})"' if rotate is not None else ""
        self.items.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{color}"{w}{t}>{esc(s)}</text>')

    def render(self):
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
                f'viewBox="0 0 {self.width} {self.height}" font-family="{FONT}">\n'
                f'<rect width="100%" height="100%" fill="#fff"/>\n' + "\n".join(self.items) + "\n</svg>\n")


class Scale:
    """Data to pixels along one axis, linear or logarithmic."""

    def __init__(self, lo, hi, p0, p1, log=False):
        if log and lo <= 0:
            raise ValueError("a log scale needs positive limits")
        self.lo, self.hi, self.p0, self.p1, self.log = lo, hi, p0, p1, log

    def __call__(self, v):
        f = (lambda x: math.log10(x)) if self.log else (lambda x: x)
        a, b = f(self.lo), f(self.hi)
        return self.p0 + (f(v) - a) / (b - a) * (self.p1 - self.p0)


def fmt_num(v):
    if v == 0:
        return "0"
    if abs(v) >= 1000 and float(v).is_integer():
        return f"{int(v):,}"
    if float(v).is_integer():
        return str(int(v))
    return f"{v:g}"


def linear_ticks(lo, hi, n=5):
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, v = [], first
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    return [(t, fmt_num(t)) for t in ticks]


def log_ticks(lo, hi):
    return [(10.0 ** e, fmt_num(10.0 ** e)) for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            if lo * 0.999 <= 10.0 ** e <= hi * 1.001]


def nice_limits(values, log, pad=0.05, zero=True):
    lo, hi = min(values), max(values)
    if log:
        return 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi))
    if zero:
        lo = min(0.0, lo)
    span = (hi - lo) or 1.0
    step = linear_ticks(lo, hi + span * pad)[1][0] - linear_ticks(lo, hi + span * pad)[0][0]
    return lo, math.ceil((hi + span * pad) / step) * step


def axes(svg, box, xs, ys, xticks, yticks, xlabel, ylabel, title=None):
    """Frame, grid, ticks and labels of one panel. box = (left, top, width, height)."""
    x0, y0, w, h = box
    for v, label in yticks:
        y = ys(v)
        svg.line(x0, y, x0 + w, y, "#e3e3e3")
        svg.line(x0 - 4, y, x0, y, "#444")
        svg.text(x0 - 7, y + 4, label, 11, "end", "#333")
    for v, label in xticks:
        x = xs(v)
        svg.line(x, y0, x, y0 + h, "#efefef")
        svg.line(x, y0 + h, x, y0 + h + 4, "#444")
        svg.text(x, y0 + h + 17, label, 11, "middle", "#333")
    svg.rect(x0, y0, w, h, "none", "#444")
    svg.text(x0 + w / 2, y0 + h + 36, xlabel, 12, "middle")
    svg.text(x0 - 48, y0 + h / 2, ylabel, 12, "middle", rotate=-90)
    if title:
        svg.text(x0 + w / 2, y0 - 10, title, 13, "middle", weight="bold")


def legend(svg, x, y, width, entries, size=11):
    """Entries (label, color, dash, marker) in rows from (x, y), wrapped at width. Returns the
    height used."""
    cx, cy, row_h = x, y, size + 9
    for label, color, dash, mark in entries:
        w = 34 + text_width(label, size) + 18
        if cx + w > x + width and cx > x:
            cx, cy = x, cy + row_h
        if mark == "bar":
            svg.rect(cx, cy - 6, 22, 11, color)
        else:
            if dash != "none":  # "none": a dot without a line
                svg.line(cx, cy, cx + 22, cy, color, 2.5, dash)
            if mark:
                svg.marker(cx + 11, cy, color, mark)
        svg.text(cx + 28, cy + 4, label, size)
        cx += w
    return cy - y + row_h


def line_chart(svg, box, series, *, xlabel, ylabel, title=None, xlog=False, ylog=False, xlim=None, ylim=None,
               xticks=None, yticks=None, hlines=()):
    """series: [{"label", "points": [(x, y)], "color", "dash", "marker", "line": bool}];
    "line": True (all points joined), False (dots only) or N (the first N joined, the rest dots);
    hlines: [(y, label, color[, "left"])]. Points with y None are left out; points above the
    scale are arrows at its top with their value."""
    xs_all = [p[0] for s in series for p in s["points"] if p[1] is not None]
    ys_all = [p[1] for s in series for p in s["points"] if p[1] is not None] + [h[0] for h in hlines]
    xlim = xlim or nice_limits(xs_all, xlog, zero=False)
    ylim = ylim or nice_limits(ys_all, ylog)
    x0, y0, w, h = box
    xs, ys = Scale(*xlim, x0, x0 + w, xlog), Scale(*ylim, y0 + h, y0, ylog)
    axes(svg, box, xs, ys, xticks or (log_ticks(*xlim) if xlog else linear_ticks(*xlim)),
         yticks or (log_ticks(*ylim) if ylog else linear_ticks(*ylim)), xlabel, ylabel, title)
    for v, label, color, *where in hlines:
        svg.line(x0, ys(v), x0 + w, ys(v), color, 1.3, "6,4")
        if where and where[0] == "left":
            svg.text(x0 + 4, ys(v) - 4, label, 10, "start", color)
        else:
            svg.text(x0 + w - 4, ys(v) - 4, label, 10, "end", color)
    for s in series:
        pts = [(x, y) for x, y in s["points"] if y is not None]
        inside = [(xs(x), ys(y)) for x, y in pts if ylim[0] <= y <= ylim[1]]
        # The line runs through the first `line` points (all when True); the rest are dots.
        n = len(pts) if s.get("line", True) is True else int(s.get("line") or 0)
        run = [(xs(x), ys(min(max(y, ylim[0]), ylim[1]))) for x, y in pts[:n]]
        if len(run) > 1:
            svg.polyline(run, s["color"], 2.0, s.get("dash"))
        for x, y in inside:
            svg.marker(x, y, s["color"], s.get("marker") or "circle")
        for x, y in pts:  # off the scale: an arrow at the edge, with the value
            if y > ylim[1]:
                px = xs(x)
                color = s["color"]
                svg.items.append(f'<polygon points="{px - 5:.1f},{y0 + 9:.1f} {px + 5:.1f},{y0 + 9:.1f} {px:.1f},{y0 + 1:.1f}" fill="{color}"/>')
                svg.text(px + 7, y0 + 12, f"{y:.3g} (off scale)", 10, "start", s["color"])


def bar_chart(svg, box, groups, series, *, ylabel, title=None, ylog=False, ylim=None, labels=True):
    """groups: category names along x; series: [{"label", "color", "values": [per group or None]}]."""
    vals = [v for s in series for v in s["values"] if v is not None]
    ylim = ylim or nice_limits(vals, ylog)
    x0, y0, w, h = box
    ys = Scale(*ylim, y0 + h, y0, ylog)
    axes(svg, box, None, ys, [], log_ticks(*ylim) if ylog else linear_ticks(*ylim), "", ylabel, title)
    gw = w / len(groups)
    bw = gw * 0.8 / len(series)
    base = ys(ylim[0])
    for gi, g in enumerate(groups):
        svg.text(x0 + gw * (gi + 0.5), y0 + h + 18, g, 12, "middle", weight="bold")
        for si, s in enumerate(series):
            v = s["values"][gi]
            bx = x0 + gw * gi + gw * 0.1 + bw * si
            if v is None:
                svg.text(bx + bw / 2, base - 4, "n/a", 9, "middle", "#888")
                continue
            top = ys(v)
            svg.rect(bx + 1, top, bw - 2, base - top, s["color"])
            if labels:
                svg.text(bx + bw / 2, top - 4, fmt_num(v), 10, "middle", "#222")


def wrap(line, chars):
    out, cur = [], ""
    for word in line.split(" "):
        if cur and len(cur) + 1 + len(word) > chars:
            out.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    return out + [cur]


def figure(width, panel_h, ncols, npanels, title, subtitle, foot, legend_entries, draw):
    """A figure of npanels panels in ncols columns; draw(svg, i, box) draws panel i."""
    margin_l, margin_r, gap = 70, 20, 80
    pw = (width - margin_l - margin_r - gap * (ncols - 1)) / ncols
    nrows = math.ceil(npanels / ncols)
    top = 50 + (18 if subtitle else 0) + 18
    scratch = Svg(width, 10)
    leg_h = legend(scratch, margin_l, 0, width - margin_l - margin_r, legend_entries) if legend_entries else 0
    foot = [piece for line in foot for piece in wrap(line, int((width - 20) / text_width("x", 10)))]
    foot_h = 16 * len(foot)
    height = int(top + nrows * (panel_h + 82) + leg_h + foot_h + 16)
    svg = Svg(width, height)
    svg.text(width / 2, 26, title, 16, "middle", weight="bold")
    if subtitle:
        svg.text(width / 2, 46, subtitle, 12, "middle", "#444")
    for i in range(npanels):
        r, c = divmod(i, ncols)
        draw(svg, i, (margin_l + c * (pw + gap), top + r * (panel_h + 82), pw, panel_h))
    y = top + nrows * (panel_h + 82) + 4
    if legend_entries:
        legend(svg, margin_l, y, width - margin_l - margin_r, legend_entries)
    for i, line in enumerate(foot):
        svg.text(10, y + leg_h + 14 + 16 * i, line, 10, "start", "#666")
    return svg.render()


# ---------------------------------------------------------------- the charts

def size_label(b):
    return f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K"


def chart_bandwidth(doc, plot, out):
    """Transfer bandwidth against message size (run.py): GB/s, and ours / raw MPI."""
    bw = doc["parts"]["bandwidth"]["data"]["rows"]
    small = doc["parts"]["small_updates"]["data"]["rows"] if "small_updates" in doc["parts"] else []
    sizes = [r["bytes"] for r in bw]
    xlim = (sizes[0] / 1.6, sizes[-1] * 1.6)
    xticks = [(s, size_label(s)) for s in sizes]
    ours, raw, stock = "#1f77b4", "#555555", "#ff7f0e"
    gb = [
        {"label": "raw MPI, submit", "points": [(r["bytes"], r["raw_submit_gbps"]) for r in bw], "color": raw, "marker": "square"},
        {"label": "raw MPI, retrieve", "points": [(r["bytes"], r["raw_retrieve_gbps"]) for r in bw], "color": raw, "dash": "5,4", "marker": "square"},
        {"label": "ours, submit (target update to)", "points": [(r["bytes"], r["ours_submit_gbps"]) for r in bw], "color": ours},
        {"label": "ours, retrieve (target update from)", "points": [(r["bytes"], r["ours_retrieve_gbps"]) for r in bw], "color": ours, "dash": "5,4"},
    ]
    if small:
        # The stock plugin moves no bytes between processes (its update is a copy in the
        # process): its microseconds per update, as bytes per second.
        gb.append({"label": "stock plugin, update to: a copy in its own process (1, 16 KiB; size / its us)", "color": stock, "marker": "diamond", "line": False,
                   "points": [(r["bytes"], r["bytes"] / (r["stock_to_us"] * 1e3)) for r in small]})
    ratio = [
        {"label": "submit", "points": [(r["bytes"], r["submit_ratio"]) for r in bw], "color": ours},
        {"label": "retrieve", "points": [(r["bytes"], r["retrieve_ratio"]) for r in bw], "color": ours, "dash": "5,4"},
    ]
    if small:
        ratio.append({"label": "bound for any plugin that moves the bytes (1, 16 KiB)", "color": stock, "marker": "diamond", "line": False,
                      "points": [(r["bytes"], r["submit_bound"]) for r in small]})
    entries = [(s["label"], s["color"], s.get("dash") if s.get("line", True) else "none", s.get("marker") or "circle") for s in gb]
    if small:
        entries.append(("right: the best ratio a plugin that moves the bytes can reach, raw / (stock update + raw)", stock, "none", "diamond"))

    def draw(svg, i, box):
        if i == 0:
            line_chart(svg, box, gb, xlabel="message size, bytes (K = KiB, M = MiB)", ylabel="GB/s", title="Bandwidth (higher is better)",
                       xlog=True, xlim=xlim, xticks=xticks, ylim=(0, 14))
        else:
            line_chart(svg, box, ratio, xlabel="message size, bytes (K = KiB, M = MiB)", ylabel="ours / raw MPI", title="Ratio to raw MPI (solid: submit, dashed: retrieve)",
                       xlog=True, xlim=xlim, xticks=xticks, ylim=(0, 1.25), yticks=[(v, f"{v:g}") for v in (0, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25)],
                       hlines=[(0.5, "target 0.5 (1, 16 KiB)", "#2ca02c"), (0.9, "target 0.9 (256 KiB and up)", "#2ca02c", "left")])
    part = doc["parts"]["bandwidth"]
    sub = f"1 worker, `target update` of a resident buffer against raw MPI send + 8-byte answer; {part['data'].get('rounds', '?')} alternating rounds, medians"
    return figure(1100, 330, 2, 2, "Transfer bandwidth against message size", sub,
                  [caption(doc, plot.get("parts", ["bandwidth"]))], entries, draw)


CONFIG_STYLE = {  # taskbench configurations: colour, dash
    "stock": ("#ff7f0e", None),
    "stock-nohh": ("#ff7f0e", "5,4"),
    "ours-1w": ("#9ecae1", None),
    "ours-2w": ("#4292c6", None),
    "ours-3w": ("#1f4e99", None),
    "ours-3w-noft": ("#2ca02c", None),
    "ours-3w-ckpt": ("#9467bd", None),
    "ours-3w-nohh": ("#1f4e99", "5,4"),
}


def chart_metg(doc, plot, out):
    """METG(50%) per pattern and configuration (taskbench.py), log scale."""
    d = doc["parts"]["metg"]["data"]
    pats, cfgs = list(d["patterns"]), list(d["configs"])
    series = []
    for c in cfgs:
        color, dash = CONFIG_STYLE.get(c, ("#777", None))
        if dash:  # lighter for the hidden-helper-less runs
            color = {"#ff7f0e": "#fdbf6f", "#1f4e99": "#8fb3e0"}.get(color, color)
        series.append({"label": d["configs"][c], "color": color, "values": [d["patterns"][p]["metg_us"].get(c) for p in pats]})

    def draw(svg, i, box):
        bar_chart(svg, box, pats, series, ylabel="METG(50%), microseconds", ylog=True, title="Lower is better")
    entries = [(s["label"], s["color"], None, "bar") for s in series]
    return figure(900, 340, 1, 1, "Task Bench METG: smallest task granularity at 50% efficiency",
                  f"{d['width']} x {d['steps']} tasks per run, cores = 2; efficiency against the best rate of the run's configurations",
                  [caption(doc, ["metg"])], entries, draw)


def chart_efficiency(doc, plot, out):
    """Efficiency against task granularity, one panel per pattern (taskbench.py)."""
    d = doc["parts"]["efficiency"]["data"]
    pats, cfgs = list(d["patterns"]), list(d["configs"])
    allg = [p["granularity_us"] for pat in pats for c in cfgs for p in d["patterns"][pat]["points"].get(c, [])]
    xlim = (10 ** math.floor(math.log10(min(allg))), 10 ** math.ceil(math.log10(max(allg))))

    def draw(svg, i, box):
        pat = d["patterns"][pats[i]]
        series = []
        for c in cfgs:
            color, dash = CONFIG_STYLE.get(c, ("#777", None))
            # K from the largest down; the line follows while the granularity shrinks, the
            # smaller K after that (the runtime's overhead floor, noisy) are dots.
            pts = [(p["granularity_us"], p["efficiency"]) for p in sorted(pat["points"].get(c, []), key=lambda p: -p["k"]) if p["k"] > 0]
            n = 1
            while n < len(pts) and pts[n][0] < pts[n - 1][0]:
                n += 1
            series.append({"label": d["configs"][c], "points": pts, "color": color, "dash": dash, "line": n})
        line_chart(svg, box, series, xlabel="task granularity, us (wall time x 2 cores / tasks)", ylabel="efficiency",
                   title=pats[i], xlog=True, xlim=xlim, ylim=(0, 1.05),
                   yticks=[(v, f"{v:g}") for v in (0, 0.25, 0.5, 0.75, 1.0)], hlines=[(0.5, "50%", "#d62728")])
        metg = [f"{c} {fmt_num(pat['metg_us'][c])}" for c in cfgs if pat["metg_us"].get(c) is not None]
        half = (len(metg) + 1) // 2
        svg.text(box[0], box[1] + box[3] + 52, "METG(50%), us: " + ", ".join(metg[:half]) + ",", 10, "start", "#444")
        svg.text(box[0], box[1] + box[3] + 65, ", ".join(metg[half:]), 10, "start", "#444")
    entries = [(d["configs"][c], *CONFIG_STYLE.get(c, ("#777", None)), "circle") for c in cfgs]
    return figure(1300, 300, 3, len(pats), "Task Bench: efficiency against task granularity (ours on 3 workers vs the stock plugin)",
                  f"{d['width']} x {d['steps']} tasks per run, K from {max(d['sizes']):,} down to 0 kernel iterations per task; "
                  "efficiency = iteration rate / the best rate of the run; the line follows K down while the granularity shrinks, smaller K are dots",
                  [caption(doc, ["efficiency"])], entries, draw)


def chart_trace(doc, plot, out):
    """A timeline written with OMPCLUSTER_TRACE, drawn by `ompcluster-trace plot`."""
    run = doc["parts"][plot.get("parts", ["run"])[0]]["data"]
    tool = os.path.join(ROOT, "target", "release", "ompcluster-trace")
    trace = os.path.join(RESULTS, run["trace"])
    if not os.access(tool, os.X_OK):
        print(f"plot: {plot['output']}: {tool} not built (cargo build --release): left as it was", file=sys.stderr)
        return None
    subprocess.run([tool, "plot", os.path.relpath(trace, ROOT), "-o", out, "--width", str(plot.get("width", 1400))],
                   cwd=ROOT, check=True, capture_output=True, text=True, timeout=300)
    return None


SOAK_OUTCOME = {"right": "#2ca02c", "wrong": "#d62728", "failed": "#ff7f0e", "hang": "#000000"}
SOAK_FAULT = {"none": "circle", "kill": "square", "freeze": "diamond"}


def chart_soak(doc, plot, out):
    """The soak (soak.py): the head's and the workers' memory over time, and every run's time
    and outcome by its fault."""
    d = doc["parts"]["soak"]["data"]
    s = d["samples"]
    mem = [
        {"label": "head (rank 0)", "color": "#1f77b4", "line": True,
         "points": [(x["t"] / 60, x["head"] / 1024) for x in s if "head" in x]},
        {"label": "largest worker", "color": "#9467bd", "line": True,
         "points": [(x["t"] / 60, max(x["workers"].values()) / 1024) for x in s if x.get("workers")]},
        {"label": "smallest worker", "color": "#c5b0d5", "line": True,
         "points": [(x["t"] / 60, min(x["workers"].values()) / 1024) for x in s if x.get("workers")]},
    ]
    mem = [m for m in mem if m["points"]]
    for m in mem:  # markers would hide the lines: thousands of samples
        m["marker"] = "none"
    runs = []
    for outcome, color in SOAK_OUTCOME.items():
        for fault, shape in SOAK_FAULT.items():
            pts = [(r["start_s"] / 60, r["seconds"]) for r in d["runs"] if r["outcome"] == outcome and r["fault"] == fault]
            if pts:
                runs.append({"label": f"{outcome}, {fault}", "color": color, "marker": shape, "line": False, "points": pts})
    t_end = max([r["start_s"] + r["seconds"] for r in d["runs"]] + [1]) / 60
    xlim = (0, max(1, math.ceil(t_end)))

    def draw(svg, i, box):
        if i == 0:
            line_chart(svg, box, mem, xlabel="minutes since the start", ylabel="RSS, MiB", xlim=xlim,
                       title="Resident memory, sampled every 0.5 s while a job runs")
        else:
            line_chart(svg, box, runs, xlabel="minutes since the start (when the run started)", ylabel="run time, s", xlim=xlim,
                       title="Runs: colour = outcome, shape = fault (circle none, square SIGKILL, diamond freeze)")
    n = d["summary"]
    entries = [(m["label"], m["color"], None, None) for m in mem] + [(r["label"], r["color"], "none", r["marker"]) for r in runs]
    sub = (f"{len(d['runs'])} runs: {n['right']} right, {n['wrong']} wrong, {n['failed']} failed, {n['hang']} hangs; "
           f"{len(d['left_behind_runs'])} left something behind; seed {d['seed']}")
    return figure(1100, 300, 1, 2, "Soak: examples and test programs in a loop with random kills and freezes", sub,
                  [caption(doc, ["soak"])], entries, draw)


CHARTS = {
    "bandwidth": chart_bandwidth,
    "metg": chart_metg,
    "efficiency": chart_efficiency,
    "trace": chart_trace,
    "soak": chart_soak,
}


def main(argv):
    paths = argv or sorted(os.path.join(RESULTS, f) for f in os.listdir(RESULTS) if f.endswith(".json") and not f.endswith(".trace.json"))
    for p in paths:
        render_file(p)


if __name__ == "__main__":
    main(sys.argv[1:])
