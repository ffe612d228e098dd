#!/usr/bin/env bash
# Fuzzes the parsers with AFL++ through cargo-afl, on the stable toolchain.
#
#   fuzz/run.sh SECONDS [TARGET...]    each target (default: all of them) for SECONDS, in turn
#
# FUZZ_PROFILE picks the cargo profile of the instrumented build: `release` (the default, for
# long runs) or `fuzz-ci` (less optimisation, no debug info: cheaper to build for CI's short pass).
#
# Needs afl++ (Debian: apt-get install afl++) and cargo-afl (cargo install --locked cargo-afl;
# then `cargo afl config --build` once). Seeds come from fuzz/corpus/<target>; AFL's queue and
# findings go to $FUZZ_OUT/<target> (default target/fuzz-out). A crash or hang found is copied
# to fuzz/regressions/<target>/ for triage, and the run exits non-zero; once fixed, that file
# keeps the fix honest in `cargo test -p skewwatch-fuzz`. Prints, per target, the executions,
# the CPU time the fuzzer and its target used, and the crashes and hangs.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:?usage: fuzz/run.sh SECONDS [TARGET...]}
shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(statsd ndjson otlp_traces otlp_metrics otlp_json scrape config fleet)
fi
# Instrumented builds get their own target directory: they must not replace the plain ones.
export CARGO_TARGET_DIR=${AFL_TARGET_DIR:-target/afl}
profile=${FUZZ_PROFILE:-release}
cargo afl build --profile "$profile" -p skewwatch-fuzz --features afl
out=${FUZZ_OUT:-target/fuzz-out}
# No UI (CI logs), no CPU pinning on a shared machine, no demand on the host's core pattern.
export AFL_NO_UI=1 AFL_NO_AFFINITY=1 AFL_SKIP_CPUFREQ=1 AFL_AUTORESUME=1 \
  AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1
# CPU time: from a cgroup of its own where the host lets us make one (cgroup v1 cpuacct or v2),
# which counts every process of the run, the forkserver AFL kills at the end included; else from
# `times` in the subshell, which misses that forkserver and is only a lower bound.
cgroup_root=""
for root in /sys/fs/cgroup/cpuacct /sys/fs/cgroup/unified /sys/fs/cgroup; do
  if [ -w "$root" ] && { [ -e "$root/cpuacct.usage" ] || [ -e "$root/cpu.stat" ]; }; then
    cgroup_root=$root
    break
  fi
done
status=0
for t in "${targets[@]}"; do
  mkdir -p "$out/$t"
  start=$(date +%s)
  fuzz=(cargo afl fuzz -V "$secs" -i "fuzz/corpus/$t" -o "$out/$t" "$CARGO_TARGET_DIR/$profile/$t")
  cg="$cgroup_root/skewwatch-fuzz-$t-$$"
  if [ -n "$cgroup_root" ] && mkdir "$cg" 2>/dev/null; then
    # Joining can still be refused (a container's cgroup tree); the fuzzer runs either way.
    rm -f "$out/$t.nocgroup"
    (echo "$BASHPID" >"$cg/cgroup.procs" 2>/dev/null || touch "$out/$t.nocgroup"
      exec "${fuzz[@]}") >"$out/$t.log" 2>&1 || true
    if [ -e "$out/$t.nocgroup" ]; then
      cpu="?"
    elif [ -e "$cg/cpuacct.usage" ]; then
      cpu=$(awk '{ printf "%.1f", $1 / 6e10 }' "$cg/cpuacct.usage")
    else
      cpu=$(awk '$1 == "usage_usec" { printf "%.1f", $2 / 6e7 }' "$cg/cpu.stat")
    fi
    rmdir "$cg" 2>/dev/null || true
    how="cgroup"
    [ ! -e "$out/$t.nocgroup" ] || how="not counted: the cgroup refused the fuzzer"
  else
    # `times` in the subshell: the CPU time of afl-fuzz and of the target it forked, waited for.
    cpu=$( ("${fuzz[@]}" >"$out/$t.log" 2>&1 || true; times) | tail -n 1 |
      awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.1f", (u[1]*60 + u[2] + s[1]*60 + s[2]) / 60 }')
    how="times, a lower bound"
  fi
  stats="$out/$t/default/fuzzer_stats"
  execs=$(awk -F' *: *' '$1 == "execs_done" { print $2 }' "$stats" 2>/dev/null || echo 0)
  found=0
  for kind in crashes hangs; do
    for f in "$out/$t"/default/"$kind"/id:*; do
      [ -e "$f" ] || continue
      mkdir -p "fuzz/regressions/$t"
      cp "$f" "fuzz/regressions/$t/$kind-$(basename "$f" | cut -d, -f1 | tr ':' '-')-$(sha1sum "$f" | cut -c1-8)"
      found=$((found + 1))
    done
  done
  echo "fuzz: $t: $(( $(date +%s) - start )) s wall, $cpu CPU-minutes ($how), ${execs:-0} executions, $found crashes+hangs"
  [ "$found" -eq 0 ] || status=1
done
exit $status
