"""The report's page shell: CSS (light and dark), the embedded plotly.js, figure boot and table sorting.

Nothing here loads anything from the network: plotly.js is inlined once from the installed plotly package,
figure specs ride in <script type="application/json"> blocks whose text can never close the tag ('<', '>'
and '&' are written as \\u003c, \\u003e, \\u0026), and every other string is HTML-escaped by the caller.
"""

from __future__ import annotations

import html
import json
import math
from functools import lru_cache
from typing import Any, Mapping

CSS = """
:root { color-scheme: light dark; --fg: #1d1f23; --muted: #5d6470; --bg: #ffffff; --card: #f5f6f8; --line: #d9dce1;
  --accent: #1f77b4; --yes: #b42318; --no: #067647; --warn: #b54708; --unclear: #475467; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6e8eb; --muted: #a3aab5; --bg: #15171a; --card: #1f2226; --line: #343840; --accent: #5aa9e6;
    --yes: #f97066; --no: #47cd89; --warn: #fdb022; --unclear: #98a2b3; } }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
header { padding: 20px 32px 8px; border-bottom: 1px solid var(--line); }
header h1 { margin: 0 0 4px; font-size: 24px; }
header .sub { color: var(--muted); font-size: 13px; }
nav { position: sticky; top: 0; z-index: 10; background: var(--bg); border-bottom: 1px solid var(--line); padding: 6px 32px; font-size: 13px; }
nav a { color: var(--accent); margin-right: 14px; text-decoration: none; }
main { padding: 0 32px 48px; max-width: 1400px; }
section { padding-top: 18px; }
h2 { font-size: 19px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.muted, .note { color: var(--muted); font-size: 13px; }
.placeholder { color: var(--muted); background: var(--card); border: 1px dashed var(--line); padding: 12px 16px; border-radius: 6px; }
.verdict-head { font-size: 22px; font-weight: 650; margin: 4px 0 8px; }
.answer-yes { color: var(--yes); } .answer-no { color: var(--no); } .answer-transport { color: var(--warn); } .answer-unclear { color: var(--unclear); }
.numbers { display: grid; grid-template-columns: repeat(auto-fit, minmax(210px, 1fr)); gap: 12px; margin: 14px 0; }
.number { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; }
.number .label { font-size: 12px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); }
.number .value { font-size: 26px; font-weight: 650; font-variant-numeric: tabular-nums; }
.number .value.long { font-size: 20px; line-height: 39px; white-space: nowrap; }
.number .detail { font-size: 12px; color: var(--muted); }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; margin: 6px 0 12px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: left; vertical-align: top; }
td.n, th.n { text-align: right; }
table.sortable th { cursor: pointer; user-select: none; white-space: nowrap; }
table.sortable th[aria-sort="ascending"]::after { content: " ▲"; }
table.sortable th[aria-sort="descending"]::after { content: " ▼"; }
.scroll { max-height: 520px; overflow: auto; border: 1px solid var(--line); border-radius: 6px; }
.scroll table { margin: 0; width: 100%; }
.scroll thead th { position: sticky; top: 0; background: var(--card); }
dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px; margin: 8px 0; }
dl.kv dt { color: var(--muted); } dl.kv dd { margin: 0; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; word-break: break-all; }
ul.warnings li { color: var(--warn); } ul.assumptions li { color: var(--muted); }
.fig { width: 100%; min-height: 200px; }
.ring-wrap { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
.ring-wrap > div:last-child { flex: 1 1 340px; min-width: 300px; }
svg.ring circle { fill: var(--card); stroke: var(--fg); stroke-width: 1.5; }
svg.ring text { fill: var(--fg); font-size: 12px; }
svg.ring text.node-index { font-weight: 700; font-size: 13px; }
.ring-order { font-size: 14px; }
.mismatch-text { color: var(--yes); font-weight: 600; }
"""

BOOT_JS = r"""
(function () {
  var dark = window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches;
  var fg = dark ? '#e6e8eb' : '#1d1f23', grid = dark ? '#343840' : '#e3e5e8';
  window.ringscopeFigures = {};
  var pending = [];
  document.querySelectorAll('script.rs-fig').forEach(function (s) {
    var fig = JSON.parse(s.textContent);
    var div = document.getElementById(s.getAttribute('data-target'));
    var L = fig.layout || {};
    L.font = Object.assign({color: fg, family: 'system-ui, sans-serif', size: 12}, L.font || {});
    Object.keys(L).forEach(function (k) {
      if (/^[xy]axis\d*$/.test(k)) { L[k].gridcolor = grid; L[k].zerolinecolor = grid; L[k].linecolor = grid; }
    });
    pending.push(Plotly.newPlot(div, fig.data, L, {displaylogo: false, responsive: true}).then(function (gd) {
      window.ringscopeFigures[div.id] = gd.data.length;
    }));
  });
  Promise.all(pending).then(function () { window.ringscopeReady = true; },
                            function (e) { console.error('ringscope: figure failed: ' + e); window.ringscopeReady = 'error'; });

  document.querySelectorAll('table.sortable').forEach(function (table) {
    var heads = table.querySelectorAll('thead th');
    heads.forEach(function (th, col) {
      th.addEventListener('click', function () {
        var asc = th.getAttribute('aria-sort') !== 'ascending';
        heads.forEach(function (h) { h.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
        var numeric = th.classList.contains('n');
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[col], y = b.cells[col];
          var u = x.hasAttribute('data-v') ? x.getAttribute('data-v') : x.textContent;
          var v = y.hasAttribute('data-v') ? y.getAttribute('data-v') : y.textContent;
          var r = numeric ? (parseFloat(u) - parseFloat(v)) : u.localeCompare(v, undefined, {numeric: true});
          return asc ? r : -r;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
"""


def e(text: Any) -> str:
    """HTML-escape any value for text or a quoted attribute."""
    return html.escape(str(text), quote=True)


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def script_json(obj: Any) -> str:
    """JSON that is safe inside a <script> element: no '<', '>' or '&' (so no '</script>'), no NaN."""
    text = json.dumps(_clean(obj), separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """plotly.js from the installed plotly package (no CDN)."""
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    if "</script" in js.lower():  # never expected; would end our <script> element early
        js = js.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")
    return js


def figure_block(fig_id: str, spec: Mapping[str, Any], caption: str = "") -> str:
    """A figure's <div> and its spec; the boot script draws it."""
    cap = f'<p class="note">{e(caption)}</p>' if caption else ""
    height = int((spec.get("layout") or {}).get("height") or 400)
    return (
        f'<div class="fig" id="{e(fig_id)}" style="height:{height}px"></div>{cap}'
        f'<script type="application/json" class="rs-fig" data-target="{e(fig_id)}">{script_json(spec)}</script>'
    )


def page(title: str, subtitle: str, nav: list[tuple[str, str]], body: str) -> str:
    """The whole document. `body` is already escaped HTML; title/subtitle/nav are escaped here."""
    links = "".join(f'<a href="#{e(anchor)}">{e(label)}</a>' for anchor, label in nav)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; "
        "style-src 'unsafe-inline'; img-src data: blob:; font-src data:\">"
        f'<meta name="color-scheme" content="light dark"><title>{e(title)}</title><style>{CSS}</style>'
        f"<script>{plotly_js()}</script></head>\n<body><header><h1>{e(title)}</h1>"
        f'<div class="sub">{e(subtitle)}</div></header><nav>{links}</nav><main>{body}</main>'
        f"<script>{BOOT_JS}</script></body></html>\n"
    )
