#!/usr/bin/env python3
"""Measures, on a real Prometheus, a fleet window's request count by two queries: the exact
growth the fleet input asks for (last_over_time now and one window ago; the binary prints it,
`skewwatch fleet-query`) and sum(increase(x[W])), against what three real sidecars were sent
(docs/adr/007).

    scripts/fleet-counts.py FLEET_WINDOW_SECS SIDECAR_WINDOW_SECS SCRAPE_INTERVAL RUN_SECS
    scripts/fleet-counts.py 6 2 3s 160

One NDJSON post per sidecar window, in its middle, so each sidecar window holds a known count;
halfway through, one sidecar restarts (SIGTERM, same port; it waits for one more scrape before
it exits, shutdown.final_scrape_grace_secs). Prints the median and largest
per-window error of each query away from the restart, and both counts around it. Needs
`prometheus` on PATH and a release build (SKEWWATCH_BIN, default target/release/skewwatch);
works in a temporary directory, ports 9711-9713 and 9790.
"""
import json, subprocess, time, urllib.request, urllib.parse, os, shutil, sys, signal, tempfile
BIN=os.path.abspath(os.environ.get("SKEWWATCH_BIN","target/release/skewwatch"))
W=float(sys.argv[1]) if len(sys.argv)>1 else 4.0   # fleet window
SIDE=sys.argv[2] if len(sys.argv)>2 else "1"       # sidecar window
SCRAPE=sys.argv[3] if len(sys.argv)>3 else "1s"
DUR=int(sys.argv[4]) if len(sys.argv)>4 else 90
ports=[9711,9712,9713]; procs=[]
os.chdir(tempfile.mkdtemp(prefix="fleet-counts-"))
def start_side(i,p):
    open(f"s{i}.yaml","w").write(f'listen: {{http: "127.0.0.1:{p}", statsd: disabled}}\nwindow: {{window_secs: {SIDE}}}\n')
    return subprocess.Popen([BIN,"run","--config",f"s{i}.yaml"],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
sides=[start_side(i,p) for i,p in enumerate(ports)]
shutil.rmtree("adrdata",ignore_errors=True)
open("adr.yml","w").write(f"global: {{scrape_interval: {SCRAPE}}}\nscrape_configs:\n  - job_name: s\n    static_configs: [{{targets: {json.dumps([f'127.0.0.1:{p}' for p in ports])}}}]\n")
prom=subprocess.Popen(["prometheus","--config.file=adr.yml","--storage.tsdb.path=adrdata","--web.listen-address=127.0.0.1:9790"],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
time.sleep(3)
def post(p,n):
    body="\n".join(json.dumps({"group":"db","shard":f"s{s}","count":n}) for s in range(8)).encode()
    try:
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{p}/api/v1/observations",data=body,headers={"Content-Type":"application/x-ndjson"}),timeout=2).read(); return True
    except Exception: return False
def q(expr,t):
    d=urllib.parse.urlencode({"query":expr,"time":f"{t:.3f}"}).encode()
    r=json.load(urllib.request.urlopen("http://127.0.0.1:9790/api/v1/query",data=d))
    return sum(float(x["value"][1]) for x in r["data"]["result"])
sel='skewwatch_shard_requests_total'
# The fleet input's own growth expression, as the binary prints it (`skewwatch fleet-query`): three
# parts per label set, the growth cur - prev + lost, never below zero (query::net).
GROWTH=subprocess.run([BIN,"fleet-query","--family","requests","--since-secs",f"{W:g}"],capture_output=True,text=True,check=True).stdout.strip()
def q_growth(t):
    d=urllib.parse.urlencode({"query":GROWTH,"time":f"{t:.3f}"}).encode()
    r=json.load(urllib.request.urlopen("http://127.0.0.1:9790/api/v1/query",data=d))
    net={}
    for x in r["data"]["result"]:
        m=dict(x["metric"]); part=m.pop("part"); k=tuple(sorted(m.items()))
        net[k]=net.get(k,0.0)+{"cur":1,"prev":-1,"lost":1}[part]*float(x["value"][1])
    return sum(max(v,0.0) for v in net.values())
inc=lambda w:f"sum(increase({sel}[{int(w*1000)}ms]))"
sw=float(SIDE); t0=time.time(); results=[]; restarted=False
nextq=(int(time.time()/W)+2)*W-1.0
per=10
while time.time()-t0<DUR:
    # one post per sidecar window, mid-window
    now=time.time(); nxt=(int(now/sw)+1)*sw+sw/2
    time.sleep(nxt-now)
    for i,p in enumerate(ports):
        if sides[i] is not None: post(p,per)
    if not restarted and time.time()-t0>DUR/2:
        sides[0].send_signal(signal.SIGTERM); sides[0].wait(); sides[0]=start_side(0,ports[0]); time.sleep(0.3); restarted=True; rt=time.time()
    if time.time()>=nextq:
        t=nextq; nextq+=W
        results.append((t,q_growth(t),q(inc(W),t)))
truth=3*8*per*(W/sw)
print(f"W={W} sidecar={SIDE}s scrape={SCRAPE} truth/window={truth} restart at {rt-t0:.0f}s")
import statistics
for name,i in (("exact",1),("increase",2)):
    errs=[abs(r[i]-truth)/truth for r in results[2:] if abs(r[0]-rt)>2*W]
    print(f"{name}: median |err| {statistics.median(errs)*100:.2f}%  max {max(errs)*100:.2f}%  windows {len(errs)}; around restart: {[round(r[i]) for r in results if abs(r[0]-rt)<=2*W]}")
for s in sides: s.terminate()
prom.terminate()
