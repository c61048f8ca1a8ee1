// The live admin page, GET /admin/: one self-contained HTML document (no
// external assets, no framework) that polls the admin API every second
// (/admin/clusters, /admin/stats, /admin/info and the fuse gauges of
// /metrics) and redraws. It reads only what the JSON pages already say, so
// the page never shows a figure the API does not.
#include <string_view>

#include "control/server.hpp"

namespace levee::control {

std::string_view admin_page_html() noexcept {
  static constexpr std::string_view page = R"html(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>levee admin</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.2em;color:#222;background:#fafafa}
h1{font-size:1.3em;margin:0 0 .3em}h2{font-size:1.1em;margin:1.2em 0 .3em}h3{font-size:1em;margin:.8em 0 .2em}
table{border-collapse:collapse;margin:.2em 0 .6em;background:#fff}
td,th{border:1px solid #ccc;padding:2px 7px;text-align:right}th{background:#eee}td.l,th.l{text-align:left}
.bad{color:#b00;font-weight:600}.ok{color:#070}.muted{color:#777}
section.cluster{border:1px solid #ddd;background:#fff;padding:.4em .8em;margin:.6em 0}
svg{background:#fff;border:1px solid #ccc}.legend span{display:inline-block;margin-right:1em}
.sw{display:inline-block;width:.8em;height:.8em;margin-right:.3em;vertical-align:middle}
</style></head>
<body>
<h1>levee <span id="version" class="muted"></span></h1>
<div id="status">loading…</div>
<div class="muted">refreshed <span id="refreshes">0</span> times, last at <span id="updated">never</span>;
 executor load <span id="executor-load">?</span>; admitted in the last minute <span id="admitted-total">0</span>,
 rejected <span id="rejected-total">0</span></div>
<div id="error" class="bad"></div>
<h2>Clusters</h2><div id="clusters"></div>
<h2>Fuses</h2><div id="fuses"><span class="muted">none</span></div>
<h2>Shedding, last minutes (per second)</h2>
<h3>by reason</h3><div id="chart-reason"></div>
<h3>by criticality</h3><div id="chart-criticality"></div>
<script>
"use strict";
const COLORS=["#d62728","#ff7f0e","#2ca02c","#1f77b4","#9467bd","#8c564b","#e377c2","#7f7f7f","#bcbd22","#17becf","#393b79","#e7ba52"];
let refreshes=0;
function el(tag,attrs,...kids){const e=document.createElement(tag);
  for(const [k,v] of Object.entries(attrs||{})){if(k==="class")e.className=v;else e.setAttribute(k,v);}
  for(const k of kids)e.append(k instanceof Node?k:document.createTextNode(String(k)));return e;}
function num(x,d=2){if(typeof x!=="number"||!isFinite(x))return "–";return Number.isInteger(x)?String(x):x.toFixed(d);}
function pct(x){return (typeof x==="number"&&x>=0)?(100*x).toFixed(1)+"%":"–";}
function row(cells,head){const tr=el("tr");for(const [i,c] of cells.entries())tr.append(el(head?"th":"td",i===0?{class:"l"}:{},c));return tr;}
function table(head,rows,attrs){const t=el("table",attrs||{});t.append(row(head,true));for(const r of rows)t.append(r);return t;}
function renderCluster(c){
  const s=el("section",{class:"cluster","data-cluster":c.name});
  s.append(el("h3",{},"cluster ",el("span",{class:"name"},c.name),c.overloaded?el("span",{class:"bad"}," overloaded"):""));
  s.append(table(["in flight","concurrency limit","queue depth","queue time (ms)","drain rate (/s)","backend utilization","retry budget","gates (throttle/quota/queue)"],
    [row([num(c.in_flight),c.limit?num(c.limit):"none",num(c.queue_depth),num(c.queue_time_ms,1),num(c.drain_rate,1),pct(c.backend_utilization),num(c.retry_budget,1),c.throttle+" / "+c.quota+" / "+c.queue])]));
  const crits=Object.keys(c.throttle_probability||{});
  s.append(table(["criticality",...crits],[row(["throttle rejection probability",...crits.map(k=>pct(c.throttle_probability[k]))]),
    row(["queued",...crits.map(k=>num(c.queue_by_criticality[k]))])]));
  const eps=(c.endpoints||[]).map(e=>{const tr=row([e.address,e.host,e.healthy?"healthy":"unhealthy",e.ejected?"ejected":"no",e.admin,
    e.base_weight>0?pct(e.effective_weight/e.base_weight):"–",num(e.weight),num(e.outstanding),pct(e.utilization)]);
    tr.setAttribute("data-endpoint",e.address);if(!e.healthy||e.ejected)tr.className="bad";return tr;});
  s.append(table(["endpoint","host","health","ejected","admin","slow-start weight","weight","in flight","utilization"],eps));
  const ts=(c.tenants||[]).map(t=>{const by=t.usage_by_criticality||{};
    const tr=row([t.name,t.quota>0?num(t.quota,3):"unlimited",num(t.usage,3),t.quota>0?pct(t.usage/t.quota):"–",...Object.keys(by).map(k=>num(by[k],3))]);
    tr.setAttribute("data-tenant",t.name);if(t.quota>0&&t.usage>t.quota)tr.className="bad";return tr;});
  const tcrits=c.tenants&&c.tenants.length?Object.keys(c.tenants[0].usage_by_criticality||{}):[];
  s.append(table(["tenant","quota (CPU-s/s)","usage","of quota",...tcrits.map(k=>k+" usage")],ts,{class:"tenants"}));
  return s;}
function renderFuses(text){
  const rows=new Map();
  for(const line of text.split("\n")){
    const m=/^levee_fuse_(connections|in_use|waiting)\{([^}]*)\}\s+(\S+)/.exec(line);if(!m)continue;
    const key=m[2];if(!rows.has(key))rows.set(key,{});rows.get(key)[m[1]]=Number(m[3]);}
  const box=document.getElementById("fuses");box.replaceChildren();
  if(!rows.size){box.append(el("span",{class:"muted"},"none"));return;}
  box.append(table(["fuse","connections","slots in use","waiting"],[...rows].map(([k,v])=>row([k,num(v.connections),num(v.in_use),num(v.waiting)]))));}
function chart(id,names,series){
  // series[p][i]: rejections of names[i] in second p, oldest first; drawn as stacked bars.
  const W=720,H=140,n=series.length,box=document.getElementById(id);box.replaceChildren();
  let max=1;for(const p of series)max=Math.max(max,p.reduce((a,b)=>a+b,0));
  const NS="http://www.w3.org/2000/svg",svg=document.createElementNS(NS,"svg");
  svg.setAttribute("width",W);svg.setAttribute("height",H);svg.setAttribute("viewBox",`0 0 ${W} ${H}`);
  const bw=n?W/n:W;
  series.forEach((p,x)=>{let y=H;p.forEach((v,i)=>{if(!v)return;const h=v/max*(H-12);y-=h;
    const r=document.createElementNS(NS,"rect");r.setAttribute("x",x*bw);r.setAttribute("y",y);r.setAttribute("width",Math.max(bw-0.5,0.5));
    r.setAttribute("height",h);r.setAttribute("fill",COLORS[i%COLORS.length]);svg.append(r);});});
  const t=document.createElementNS(NS,"text");t.setAttribute("x",4);t.setAttribute("y",11);t.setAttribute("font-size","10");
  t.textContent=`max ${max}/s over ${n} s`;svg.append(t);box.append(svg);
  const legend=el("div",{class:"legend"});names.forEach((nm,i)=>{const tot=series.reduce((a,p)=>a+(p[i]||0),0);
    legend.append(el("span",{"data-series":nm},el("span",{class:"sw",style:`background:${COLORS[i%COLORS.length]}`}),`${nm}: ${tot}`));});
  box.append(legend);}
async function get(path,json){const r=await fetch(path,{cache:"no-store"});if(!r.ok&&path!=="/ready")throw new Error(path+": "+r.status);return json?r.json():r.text();}
async function refresh(){
  try{
    const [cl,st,info,metrics]=await Promise.all([get("/admin/clusters",true),get("/admin/stats",true),get("/admin/info",true),get("/metrics",false)]);
    document.getElementById("version").textContent=`${info.version} (${info.commit}, ${info.build_type}), config ${info.config_file}, generation ${info.generation}`;
    const st_el=document.getElementById("status");st_el.replaceChildren(el("span",{class:cl.ready?"ok":"bad"},cl.ready?"ready":"not ready"),cl.draining?el("span",{class:"bad"}," draining"):"");
    document.getElementById("executor-load").textContent=pct(cl.executor_load);
    document.getElementById("clusters").replaceChildren(...cl.clusters.map(renderCluster));
    renderFuses(metrics);
    const sum=a=>a.reduce((x,y)=>x+y,0);const last=a=>a.slice(-60);
    document.getElementById("admitted-total").textContent=sum(last(st.admitted));
    document.getElementById("rejected-total").textContent=sum(last(st.rejected_by_reason).map(sum));
    chart("chart-reason",st.reasons,st.rejected_by_reason);
    chart("chart-criticality",st.criticalities,st.rejected_by_criticality);
    document.getElementById("error").textContent="";
    document.getElementById("updated").textContent=new Date().toISOString();
    document.getElementById("refreshes").textContent=String(++refreshes);
  }catch(e){document.getElementById("error").textContent="refresh failed: "+e.message;}
}
refresh();setInterval(refresh,1000);
</script></body></html>
)html";
  return page;
}

}  // namespace levee::control
