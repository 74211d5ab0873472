"""The map's interactive 2-D page: one small self-contained HTML file.

Inline JS draws on a canvas, the points inline as compact JSON (integer coordinates, cluster and
contact indices, a short snippet), with a search box, a cluster list that opens a cluster's
conversations, and a hover card. Nothing is fetched when the page is viewed.
"""

from __future__ import annotations

import html
import json
from typing import Any

import numpy as np
import polars as pl

from brb_pipeline.core.insights.map_style import color, map_subtitle

HTML_SNIPPET_CHARS = 100  # hover and list text per point; the page never holds whole chunks
HTML_GRID = 10_000  # coordinates are integers 0..HTML_GRID (a 1e-4 step is below a pixel)


def map_data(df: pl.DataFrame, summary: pl.DataFrame, title: str, *,
             snippet_chars: int = HTML_SNIPPET_CHARS) -> dict[str, Any]:
    """The compact JSON the 2-D page draws from.

    Coordinates are scaled to integers 0..``HTML_GRID``; contacts and dates are dictionary
    encoded (an index per point); snippets are cut to ``snippet_chars``.

    Returns:
        ``{"title", "subtitle", "clusters": [{"id", "label", "n", "color"}], "contacts",
        "dates", "x", "y", "c" (index into clusters), "k" (contacts), "d" (dates), "s"}``.
    """
    ids = summary["cluster_id"].to_list() if summary.height else []
    if df.height and set(df["cluster_id"].unique().to_list()) - set(ids):
        ids = ids + sorted(set(df["cluster_id"].unique().to_list()) - set(ids))
    index = {c: i for i, c in enumerate(ids)}
    rows = {r["cluster_id"]: r for r in summary.iter_rows(named=True)} if summary.height else {}
    counts = dict(df.group_by("cluster_id").len().iter_rows()) if df.height else {}
    clusters = [{"id": int(c), "label": "Unclustered" if c < 0 else (rows.get(c, {}).get("label") or f"Cluster {c}"),
                 "n": int(counts.get(c, 0)), "color": color(int(c))} for c in ids]
    contacts, k = _codes(df["contact"].to_list())
    dates, d = _codes(df["date"].str.slice(0, 10).to_list())
    xy = df.select("x", "y").to_numpy() if df.height else np.empty((0, 2))
    if len(xy):
        lo, hi = xy.min(axis=0), xy.max(axis=0)
        scale = HTML_GRID / max(float((hi - lo).max()), 1e-9)
        grid = np.rint((xy - lo) * scale).astype(np.int64)
    else:
        grid = np.empty((0, 2), dtype=np.int64)
    snippets = [s if len(s) <= snippet_chars else s[:snippet_chars - 1].rstrip() + "…"
                for s in df["snippet"].to_list()]
    return {"title": title, "subtitle": map_subtitle(df, summary), "clusters": clusters,
            "contacts": contacts, "dates": dates, "x": grid[:, 0].tolist(),
            "y": grid[:, 1].tolist(), "c": [index[c] for c in df["cluster_id"].to_list()],
            "k": k, "d": d, "s": snippets}


def _codes(values: list[str]) -> tuple[list[str], list[int]]:
    uniq = sorted(set(values))
    pos = {v: i for i, v in enumerate(uniq)}
    return uniq, [pos[v] for v in values]


def html_2d(df: pl.DataFrame, summary: pl.DataFrame, title: str) -> str:
    """The self-contained 2-D page: inline JS on a canvas, the data inline as JSON, no fetches."""
    payload = json.dumps(map_data(df, summary, title), ensure_ascii=False, separators=(",", ":"))
    # Inside <script>, "</script>" or "<!--" in a message would end the block: "<" never
    # appears raw (a JSON string may spell it \u003c).
    payload = payload.replace("<", "\\u003c")
    return (_PAGE.replace("__TITLE__", html.escape(title)).replace("__DATA__", payload))


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<title>__TITLE__</title>
<style>
*{box-sizing:border-box}body{margin:0;font:13px system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#222;display:flex;height:100vh;overflow:hidden}
#map{flex:1;position:relative;background:#fff}canvas{display:block;width:100%;height:100%;cursor:grab}
#side{width:340px;border-left:1px solid #ddd;display:flex;flex-direction:column;background:#fafafa}
#head{padding:10px 12px;border-bottom:1px solid #ddd}h1{font-size:16px;margin:0 0 2px}#sub{color:#666;font-size:12px}
#q{width:100%;margin-top:8px;padding:6px 8px;border:1px solid #bbb;border-radius:4px;font-size:13px}
#count{color:#666;font-size:12px;margin-top:4px}
#clusters{flex:0 0 38%;overflow:auto;border-bottom:1px solid #ddd}#list{flex:1;overflow:auto}
.cl{padding:4px 12px;cursor:pointer;display:flex;gap:6px;align-items:center}.cl:hover{background:#eee}.cl.sel{background:#e3ecf7}
.sw{width:10px;height:10px;border-radius:50%;flex:none}.cl .n{margin-left:auto;color:#777;font-variant-numeric:tabular-nums}
.it{padding:6px 12px;border-bottom:1px solid #eee}.it .m{color:#666;font-size:12px}
#tip{position:absolute;pointer-events:none;background:rgba(255,255,255,.96);border:1px solid #bbb;border-radius:4px;padding:6px 8px;max-width:320px;display:none;box-shadow:0 1px 4px rgba(0,0,0,.15)}
#tip .m{color:#666;font-size:12px}#hint{position:absolute;left:10px;bottom:8px;color:#888;font-size:12px}
</style></head><body>
<div id="map"><canvas id="cv"></canvas><div id="tip"></div><div id="hint">scroll to zoom · drag to pan · double-click to reset · click a point to open its cluster</div></div>
<div id="side"><div id="head"><h1 id="title"></h1><div id="sub"></div>
<input id="q" type="search" placeholder="Search snippets, contacts, clusters…" autocomplete="off">
<div id="count"></div></div><div id="clusters"></div><div id="list"></div></div>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const D=JSON.parse(document.getElementById("data").textContent);
const N=D.x.length,C=D.clusters,cv=document.getElementById("cv"),ctx=cv.getContext("2d");
const tip=document.getElementById("tip"),q=document.getElementById("q");
document.getElementById("title").textContent=D.title;document.getElementById("sub").textContent=D.subtitle;
const low=new Array(N);for(let i=0;i<N;i++)low[i]=(D.s[i]+" "+D.contacts[D.k[i]]+" "+C[D.c[i]].label).toLowerCase();
let match=null,sel=-1,view={s:1,tx:0,ty:0},W=0,H=0,dpr=1;
const cx=new Float64Array(C.length),cy=new Float64Array(C.length),cn=new Float64Array(C.length);
for(let i=0;i<N;i++){const c=D.c[i];cx[c]+=D.x[i];cy[c]+=D.y[i];cn[c]++}
for(let c=0;c<C.length;c++){if(cn[c]){cx[c]/=cn[c];cy[c]/=cn[c]}}
let X0=1e9,X1=-1e9,Y0=1e9,Y1=-1e9;for(let i=0;i<N;i++){X0=Math.min(X0,D.x[i]);X1=Math.max(X1,D.x[i]);Y0=Math.min(Y0,D.y[i]);Y1=Math.max(Y1,D.y[i])}if(!N){X0=Y0=0;X1=Y1=1}
function fit(){const m=50,s=Math.min((W-2*m)/Math.max(X1-X0,1),(H-2*m)/Math.max(Y1-Y0,1));view={s:s,tx:(W-(X1+X0)*s)/2,ty:(H-(Y1+Y0)*s)/2}}
function sx(x){return x*view.s+view.tx}function sy(y){return H-(y*view.s+view.ty)}
function resize(){dpr=window.devicePixelRatio||1;W=cv.clientWidth;H=cv.clientHeight;cv.width=W*dpr;cv.height=H*dpr;ctx.setTransform(dpr,0,0,dpr,0,0)}
const R=Math.max(1.5,Math.min(6,Math.sqrt(200000/Math.max(N,1))/4));
function on(i){return (match===null||match[i])&&(sel<0||D.c[i]===sel)}
let S0=1;function draw(){ctx.clearRect(0,0,W,H);const r=R*Math.min(3,Math.sqrt(Math.max(1,view.s/S0)));
for(let pass=0;pass<2;pass++)for(let i=0;i<N;i++){const a=on(i);if((pass===1)!==a)continue;
const c=C[D.c[i]];ctx.globalAlpha=a?(c.id<0?0.45:0.85):0.12;ctx.fillStyle=c.id<0?"#bdbdbd":c.color;
ctx.beginPath();ctx.arc(sx(D.x[i]),sy(D.y[i]),c.id<0?r*0.7:r,0,6.2832);ctx.fill()}
ctx.globalAlpha=1;ctx.textAlign="center";ctx.textBaseline="middle";ctx.lineJoin="round";const boxes=[];
const order=C.map((c,i)=>i).filter(i=>C[i].id>=0&&cn[i]).sort((a,b)=>cn[b]-cn[a]);
for(const c of order){if(sel>=0&&c!==sel)continue;const fs=Math.round(11+5*Math.min(1,Math.sqrt(cn[c]/N/0.08)));
ctx.font="600 "+fs+"px system-ui,sans-serif";const t=C[c].label,w=ctx.measureText(t).width,x=sx(cx[c]),y=sy(cy[c]);
const b=[x-w/2-3,y-fs/2-2,x+w/2+3,y+fs/2+2];if(boxes.some(o=>b[0]<o[2]&&o[0]<b[2]&&b[1]<o[3]&&o[1]<b[3]))continue;boxes.push(b);
ctx.lineWidth=4;ctx.strokeStyle="rgba(255,255,255,.9)";ctx.strokeText(t,x,y);ctx.fillStyle="#111";ctx.fillText(t,x,y)}}
function nearest(mx,my){let best=-1,bd=100;for(let i=0;i<N;i++){if(!on(i))continue;const dx=sx(D.x[i])-mx,dy=sy(D.y[i])-my,d=dx*dx+dy*dy;if(d<bd){bd=d;best=i}}return best}
function el(tag,cls,text){const e=document.createElement(tag);if(cls)e.className=cls;if(text!==undefined)e.textContent=text;return e}
function clusters(){const box=document.getElementById("clusters");box.replaceChildren();const m=new Array(C.length).fill(0);
for(let i=0;i<N;i++)if(match===null||match[i])m[D.c[i]]++;
const order=C.map((c,i)=>i).sort((a,b)=>(C[a].id<0)-(C[b].id<0)||m[b]-m[a]);
for(const c of order){if(!m[c])continue;const row=el("div","cl"+(c===sel?" sel":""));row.dataset.c=c;const sw=el("span","sw");
sw.style.background=C[c].id<0?"#bdbdbd":C[c].color;row.append(sw,el("span",null,C[c].label),el("span","n",match===null?String(m[c]):m[c]+" / "+C[c].n));
row.onclick=()=>select(c===sel?-1:c);box.append(row)}
let t=0;for(let i=0;i<N;i++)if(match===null||match[i])t++;
document.getElementById("count").textContent=match===null?N.toLocaleString()+" chunks":t.toLocaleString()+" of "+N.toLocaleString()+" chunks match"}
function list(){const box=document.getElementById("list");box.replaceChildren();if(sel<0){box.append(el("div","it m","Click a cluster or a point to list its conversations."));return}
const ids=[];for(let i=0;i<N;i++)if(on(i))ids.push(i);ids.sort((a,b)=>D.dates[D.d[b]]<D.dates[D.d[a]]?-1:1);
box.append(el("div","it m",C[sel].label+": "+ids.length+" chunks, newest first"));
for(const i of ids.slice(0,400)){const it=el("div","it");it.append(el("div","m",D.contacts[D.k[i]]+" · "+D.dates[D.d[i]]),el("div",null,D.s[i]));box.append(it)}
if(ids.length>400)box.append(el("div","it m",(ids.length-400)+" more; refine the search to see them"))}
function select(c){sel=c;clusters();list();draw()}
q.addEventListener("input",()=>{const t=q.value.trim().toLowerCase();if(!t){match=null}else{match=new Uint8Array(N);for(let i=0;i<N;i++)match[i]=low[i].includes(t)?1:0}clusters();list();draw()});
let drag=null;cv.addEventListener("mousedown",e=>{drag={x:e.clientX,y:e.clientY,tx:view.tx,ty:view.ty,moved:false}});
window.addEventListener("mouseup",e=>{if(drag&&!drag.moved){const r=cv.getBoundingClientRect(),i=nearest(e.clientX-r.left,e.clientY-r.top);if(i>=0)select(D.c[i]);else if(e.target===cv)select(-1)}drag=null});
cv.addEventListener("mousemove",e=>{const r=cv.getBoundingClientRect(),mx=e.clientX-r.left,my=e.clientY-r.top;
if(drag){const dx=e.clientX-drag.x,dy=e.clientY-drag.y;if(Math.abs(dx)+Math.abs(dy)>3)drag.moved=true;view.tx=drag.tx+dx;view.ty=drag.ty-dy;tip.style.display="none";draw();return}
const i=nearest(mx,my);if(i<0){tip.style.display="none";return}tip.replaceChildren(el("div","m",D.contacts[D.k[i]]+" · "+D.dates[D.d[i]]+" · "+C[D.c[i]].label),el("div",null,D.s[i]));
tip.style.display="block";tip.style.left=Math.min(mx+14,W-330)+"px";tip.style.top=Math.min(my+14,H-90)+"px"});
cv.addEventListener("mouseleave",()=>{tip.style.display="none"});
cv.addEventListener("wheel",e=>{e.preventDefault();const r=cv.getBoundingClientRect(),mx=e.clientX-r.left,my=H-(e.clientY-r.top),f=Math.exp(-e.deltaY*0.0015);
view.tx=mx-(mx-view.tx)*f;view.ty=my-(my-view.ty)*f;view.s*=f;draw()},{passive:false});
cv.addEventListener("dblclick",()=>{fit();draw()});
window.addEventListener("resize",()=>{resize();fit();S0=view.s;draw()});
resize();fit();S0=view.s;clusters();list();draw();
</script></body></html>
"""
