#!/usr/bin/env bash
# The device runs still owed (docs/measurement.md, "Device runs still to make"), one step per `run` call of
# the lent H200 (a call may last 600 s; the machine goes back 30 s after one). Each step writes under $OUT and
# stops itself (`timeout`) early enough for its files to come back. Run from the repository's root:
#
#   call 1, carry [".whl1"]:  bash scripts/device_session.sh setup1
#   call 2, carry [".whl2"]:  bash scripts/device_session.sh setup2 remeasure handoff
#   then, one or two per call: replay (resumes), throughput, slow, throughput-full, gpu-tests, owed-tests
#
# Steps, with what each settles:
#   setup1 / setup2   the wheels of ../shared/device/fetch_wheels.sh installed into /tmp/site
#   remeasure         the optimized solutions of the tasks named in ONLY (default CrossEntropy: v1 since
#                     the replay of 2026-12-05) through fidelity.py: status, E, U and fidelity rows, and the
#                     gap study's files in $OUT/gap_remeasure to merge (~40 s a solution). 2026-12-05 did
#                     LinearSwiGLU (v1)
#   handoff           #15: the output hand-off, torch.save vs the raw tensor file, on this host (~40 s;
#                     done 2026-12-05)
#   throughput        #15/#35: the light batch: the defaults and each lever of issue 35 alone, side by side
#                     (--variant: compile_outside_lane=1, graph_replay=1, stop_rule=interval,
#                     precompute_reference=1), with the warm env.step (~5 x 80 s + the serial 3 and the steps;
#                     2026-12-05 ran held_output_bytes=0 and timed_shapes=2 in their place)
#   throughput-levers #35: every lever together (the simulator's "all five, 4 slots": 634 light, 495 full
#                     predicted) beside the defaults (529, 357), the light batch and 16 of the full mix; PARTS=light
#   replay            #20: the replay agent over TASKS (default all); resumes from $DB (/tmp/kgg_bench.sqlite3
#                     while the machine stays warm; after it went back, put the returned bench_store.sqlite3 in
#                     the working tree, name it in DB= and in the call's carry if git ignores it); copies the
#                     store with sqlite's backup API and writes the JSON report. --compile-baseline off: the
#                     report's metrics are against torch eager. 2026-12-05: all 40 tasks in 408 s
#   slow              #14: fidelity rows for the slow solutions, each capped (--cap-ms); ~30 s a solution,
#                     JOBS (default 3) at once through the lane, so over one or two calls: put each call's fidelity JSON in the working tree and name
#                     them all in RESUME="a.json b.json" for the next (scripts/fidelity.py --resume)
#   throughput-full   #15: the full mix (attention and convolution first), records kept per evaluation;
#                     2026-12-05 reached 50 of 64 in its 500 s
#   gpu-tests         the cuda tests of the lanes, library cache, early exit and call deadlines, and of issue 35's
#                     timing levers (graph replay, the early check)
#   defaults-check    #35: the new defaults (2026-12-06 evening) beside the old, PART light or full
#   full-levers       #35: the full mix's first MAX (16) with the defaults and with every lever (ALL_NEW)
#   fidelity-levers   #35: the levers' E against do_bench (fidelity.py --variant): the defaults, ALL_NEW and each
#                     lever group alone on the light batch's optimized Triton solutions (FID_ONLY); ~480 s
#   kb-survey         #36: scripts/kb_library_times.py over KB_DIRS (imported KernelBench tasks, carried), SAMPLE
#   ipc-probe         #35: the outputs' hand-over by CUDA IPC, the mechanism alone (scripts/ipc_probe.py;
#                     docs/measurement.md "The outputs handed over on the device"): 24 device copies (1.35 GiB)
#                     exported by one process, opened, range-checked, copied and closed by a fresh opener into the
#                     checker's arena (3 rounds, each part timed), then the hostile rows (forged, freed and
#                     reallocated handles, the extent, the sandbox's namespaces, the exporter stopped and killed);
#                     IPC_S (default 240) is the probe's own limit, inside STEP_S; JSON in $OUT/ipc_probe/
#   ipc-probe-vmm     #35: the second route for the outputs' hand-over, CUDA VMM allocations exported as POSIX fds
#                     and sent by SCM_RIGHTS (scripts/ipc_probe_vmm.py, core/cuda_vmm.py): 24 outputs (1.35 GiB)
#                     exported, imported, mapped and copied into the checker's VMM arena, in the root namespaces
#                     and with the exporter in the sandbox's (bwrap, unshare), then the hostile rows (file, pipe,
#                     /dev/zero, /dev/nvidiactl fds, the extent, the exporter killed while mapped); VMM_S (default
#                     240) is the probe's own limit, inside STEP_S; JSON in $OUT/ipc_probe_vmm/; then the route's
#                     gpu tests (tests/test_cuda_vmm.py, 150 s at most) into $OUT/ipc_probe_vmm/gpu_tests.txt
#   probe-fold        #35: TimingConfig.probe_readings_count (the probe's readings begin the full timing; built
#                     off 2026-12-06, docs/measurement.md item 12): first its gpu test (the probe's readings and the
#                     full timing's own read a kernel alike, within 3%; the parent recomputes the combined sample),
#                     then the light batch's 24 with the defaults, the lever, and the lever with probe_hopeless_reps=3
#                     side by side (SIMULATED beforehand: 794 -> 808 alone, 863 -> 879 with the hopeless rule);
#                     the throughput rows in $OUT/probe_fold/
#   handover          #35: the outputs handed over on the device by CUDA IPC, wired behind EvalConfig.hand_over_outputs
#                     (off; engine/handover.py): the light batch's 24 with the defaults and with the flag side by
#                     side (--variant "" --variant hand_over_outputs=1): the verdicts must agree, and the flag's
#                     records carry check_handover, check_handover_copies and outputs_handed (a record flagged
#                     outputs_ipc_fallback fell back to files); the throughput rows in $OUT/handover/; with
#                     ENV_STEPS (e.g. Softmax,LayerNorm) also the warm env.step with and without the flag (the 4 s goal)
#   owed-tests        the cuda tests not yet run on a GPU: call deadlines' launch bound, the service, typed terms,
#                     low-bit dtypes, issue 34's MoE/backward tasks and its TileLang solutions (~570 s)
#   handover-diag     #35: the hand-over's false non_finite (2026-12-07) diagnosed layer by layer without the
#                     engine (scripts/probes/handover_diag.py: the child's records against torch's memory snapshot,
#                     the opener's copies against the truth, byte for byte; ~3 x 170 s at most)
#   handover-gpu-tests  #35: the hand-over's gpu tests (engine, arena's wait and release, the child's hold), the
#                     digest's device sums (tests/test_inputs.py) and the library's first calls before the lane
#                     (tests/test_library_warm.py: Attention's with and without TimingConfig.library_warm_before_lane)
#   library-warm      #35: the full mix's first MAX (16) with the defaults (library_warm_before_lane on since the H100
#                     run of 2026-12-07 13:00: +14.2%, SIMULATED +14.7%) and with library_warm_before_lane=0 side by
#                     side; statuses and E must agree; the throughput rows in $OUT/library_warm/
#   handover-full     #35: the full mix's first MAX (16) with the defaults and with hand_over_outputs=1 side by side:
#                     the statuses must agree (CrossEntropyBackward's OOM of 2026-12-07), no check held past the
#                     cover's bound, each held child's child_hold_reserved_mib; the rows in $OUT/handover_full/
#   light-warm        #35: the light batch with the defaults (library_warm_before_lane on) and with it off, side by
#                     side (SIMULATED: no change there), with ENV_STEPS the warm env.step of both (ENV_VARIANT: the
#                     steps' second variant instead, e.g. read_outputs_outside_lane=1,read_outputs_while_timing=1,
#                     whose step gain alone is unmeasured); $OUT/light_warm/
#   prestart-next     #35: the full mix's first MAX (16) with the defaults and with prestart_for_next=0 side by side
#                     (a slot takes its next job as its child ends and pre-starts the child for it: ON by default
#                     since the H100 runs of 2026-12-07 15:12-15:29, +5.8% and +16.1%; SIMULATED +4.1% and
#                     +8.1%); statuses and E must agree, library_warm_prestarted_s and _shared_s say where the
#                     warm-ups went
#   staging           #35: the outputs' writes through a pinned host buffer (Placement.output_staging_bytes, OFF;
#                     core/tensor_file._write_staged): first its gpu tests (the same file byte for byte) and
#                     scripts/staging_bench.py (the mechanism alone: pageable and pinned writes and reads), then the
#                     light batch with the defaults and with output_staging_bytes=64M side by side (with ENV_STEPS
#                     the warm env.step of both too); statuses and E must agree, the rows print the outputs' write
#                     and read medians; $OUT/staging/
#   staging-serial    #35: the staging buffer's E against the one-at-a-time path: the light batch with --serial
#                     SERIAL (13, all of it; ~25 s each, first) and then the defaults and output_staging_bytes=64M
#                     beside each other; each variant's E agreement with the serial rows is the verdict (<= 2%);
#                     $OUT/staging_serial/ (~560 s: give STEP_S=575)
#   read-arena        #35: Placement.read_arena_bytes (judge/read_arena.py, OFF): scripts/read_arena_bench.py on the
#                     GPU host (the prefetch into fresh memory against the kept arena, 24 x 96 MiB), then the light
#                     batch with the defaults and read_arena_bytes=3072M (with ENV_STEPS, the warm env.step of both:
#                     the check's prefetch was 1.7-2.2 s of the H200 steps of 2026-12-07); statuses and E must agree,
#                     the rows print the outputs' read medians; $OUT/read_arena/ (~450 s with the steps)
#   early-gpu         #35: Placement.prestart_early's gpu test (a cuda child started early, bound with its task's
#                     warm-up) and the read arena's bench on the GPU host; $OUT/early_gpu/ (~150 s)
#   arena-steps       #35: the read arena's bench on the GPU host, then the warm env.step of ENV_STEPS with the
#                     defaults and read_arena_bytes=3072M (as staging-steps does for the staging buffer);
#                     $OUT/arena_steps/ (~330 s: STEP_S=340; BENCH=0 BENCH_S=20 leaves the bench out)
#   prestart-early    #35: Placement.prestart_early (sandbox/prestart.ChildPool.start_early, OFF): each slot's next
#                     child's process started beside its running child, its task given as that child ends, on
#                     the full mix's first MAX (16) beside the defaults (SIMULATED +3.5..6.4% per run on the
#                     15:12 rows, sim/prestart_start_table.py); statuses and E must agree, the row prints how long
#                     the early children waited for their task; $OUT/prestart_early/ (~400 s: STEP_S=560)
#   staging-bench     #35: scripts/staging_bench.py alone (the checker's side: reads into a kept pinned block
#                     against pageable, with fresh pinning timed apart); $OUT/staging/ (~40 s)
#   staging-steps     #35: the warm env.step of ENV_STEPS (default Softmax,LayerNorm) with the defaults and with
#                     output_staging_bytes=64M (the 4 s goal: the outputs' writes and reads were 3.7-4.3 s of the
#                     8.6-10.4 s steps of 2026-12-07); $OUT/staging_steps/
#   library-trust     #35: TimingConfig.library_check_shapes (judge/library_trust.py, OFF): its gpu test (five
#                     evaluations on one fresh cache, the last trusting all shapes but one, E within 10%), then the
#                     light batch with the defaults and library_check_shapes=1 (the defaults' row confirms the
#                     hints the lever's row then trusts; the row prints the trusted shapes); with ENV_STEPS the warm
#                     env.step of both; $OUT/library_trust/ (~400 s)
#   warmup-short      #35: TimingConfig.warmup_ms 25 -> 5 (the probe's warm-ups after the correctness calls warmed
#                     both callables): E against do_bench on the six optimized Triton solutions of the light batch
#                     (scripts/fidelity.py --variant "" --variant warmup_ms=5); $OUT/warmup_short/ (~330 s)
#   warmup-light      #35: the light batch with the defaults and warmup_ms=5 beside each other; $OUT/warmup_light/
#   staging-laned     #35: the outputs' copies off the GPU under the shared lane (Placement.outputs_copy_laned, ON
#                     with the pinned buffer since 2026-12-08; without it a checkpoint's device copies run beside other
#                     evaluations' timings): the light batch's first SERIAL (6: the optimized solutions) one at a
#                     time, then the defaults, the buffer without laned copies, and neither (the defaults before
#                     2026-12-08) beside each other; each row's E against the serial rows (<= 2%) is the verdict;
#                     $OUT/staging_laned/ (~480 s: STEP_S=540; 2026-12-08 00:46 on an H100 ran the three the other
#                     way round, before the flip)
#   new-levers        #35: every switch built off since 2026-12-07 and still off, at once (NEW_OFF: the read arena,
#                     the early-started child, the library check on 1 shape, the warm-up at 5 ms) beside
#                     the defaults: the light batch and, with ENV_STEPS, the warm env.step (the outputs' files were 5.2 s of the
#                     11-12 s H200 steps of 2026-12-07); statuses and E per submission must agree; $OUT/new_levers/
#                     (~450 s with ENV_STEPS=Softmax,LayerNorm: STEP_S=480)
#   timing-release    the timed outputs let go under watch and the timing bench guarded (child/release.py,
#                     2026-12-07): gpu_bench_rep_shadow.py and gpu_finalizer_in_timing.py, an honest kernel, then
#                     E against do_bench on four optimized Triton solutions (~540 s)
#
# Run here, not on the device, once a call's files came back:
#   merge-remeasure   FILES=<that remeasure call's files_at>: its gap study rows merged into CORPUS (default
#                     results/h200_2026-12-04_corpus; the newest version of a task kept), the table rewritten
#                     (CORPUS/gap_study_table.txt), its best known E copied into BEST (kernelgym_gap/data/best_known.json,
#                     what the diagnosis reads; entries of tasks no longer measured are kept) and its fidelity
#                     JSON copied into DEST (results/h200_<today>/)
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
# issue 35's lane-time levers of 2026-12-06, all together (the steady clock warm-up, the warm-up once, the
# rechecks after the exclusive lane, the check's reads before the lane and while the child times, the outputs
# held on the device, graph replay, the interval stop)
# the switches built off on 2026-12-07/08 and still off (read arena, early start, library check on 1 shape, the
# warm-up at 5 ms); the pinned staging buffer and its laned copies, in it on 2026-12-08 00:40, are defaults since
NEW_OFF=read_arena_bytes=3072M,prestart_early=1,library_check_shapes=1,warmup_ms=5
ALL_NEW=clock_warmup_rule=steady,warm_once=1,recheck_outside_exclusive=1,read_outputs_outside_lane=1,read_outputs_while_timing=1,held_device_bytes=1024M,graph_replay=1,stop_rule=interval
mkdir -p "$OUT"
STEP_S=${STEP_S:-540}          # a step's own limit: the call's 600 s less the time to send $OUT back
DB=${DB:-/tmp/kgg_bench.sqlite3}
BACKEND=${BACKEND:-cuda}       # replay only: cpu to try the step here
TASKS=${TASKS:-all}
LABEL=${LABEL:-replay-h200}   # replay only: the run's label in the store
ONLY=${ONLY:-CrossEntropy}   # remeasure only: tasks (or Task/solution substrings), comma-separated

install_wheels() {   # $1: the carried folder
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$1"/*.whl >/dev/null 2>&1 \
    || { echo "installing $1 failed"; return 1; }
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, \
torch.cuda.get_device_name(0))"
}

full_beside() {   # $1 the folder under $OUT, $2 the variant: the full mix's first MAX (16) with the defaults beside it
  mkdir -p "$OUT/$1"
  timeout $(( STEP_S - 20 )) python3 scripts/throughput.py --backend cuda --max ${MAX:-16} --serial 0 \
    --per-gpu ${PER_GPU:-4} --fixtures ${FIXTURES:-all} --variant "" --variant "$2" \
    --out "$OUT/$1" 2>&1 | tee "$OUT/$1/log.txt" | tail -${TAIL:-30}
}

light_beside() {   # $1 the folder under $OUT, $2 the variant, $3 the warm env.step's variant (with ENV_STEPS), $4 the
                  # seconds kept from STEP_S, $5 the log's lines shown: the light batch with the defaults beside it
  mkdir -p "$OUT/$1"
  timeout $(( STEP_S - $4 )) python3 scripts/throughput.py --backend cuda \
    --tasks GELU,LayerNorm,Softmax,RMSNorm,AddReLU,RowSum --max 24 --fixtures none --serial ${SERIAL:-0} --per-gpu 4 \
    --variant "" --variant "$2" ${ENV_STEPS:+--env-steps "$ENV_STEPS" --env-steps-variant "$3"} \
    --out "$OUT/$1" 2>&1 | tee "$OUT/$1/log.txt" | tail -${TAIL:-$5}
}

steps_beside() {  # $1 the folder under $OUT, $2 the variant, $3 the seconds kept from STEP_S: the warm env.step of
                  # ENV_STEPS (default Softmax,LayerNorm) with the defaults and with $2, after a two-evaluation batch of
                  # each (the batch is not the point)
  mkdir -p "$OUT/$1"
  timeout $(( STEP_S - $3 )) python3 scripts/throughput.py --backend cuda --tasks "${ENV_STEPS:-Softmax,LayerNorm}" \
    --max 2 --fixtures none --serial 0 --per-gpu 4 --variant "" --variant "$2" \
    --env-steps "${ENV_STEPS:-Softmax,LayerNorm}" --env-steps-variant "$2" \
    --out "$OUT/$1" 2>&1 | tee "$OUT/$1/log.txt" | tail -${TAIL:-20}
}

arena_bench() {   # $1 the folder under $OUT, $2 files, $3 repetitions, $4 the seconds it may take:
                  # scripts/read_arena_bench.py (96 MiB files) on this host
  mkdir -p "$OUT/$1"
  timeout "$4" python3 scripts/read_arena_bench.py --files "$2" --mib 96 --reps "$3" \
    --json "$OUT/$1/bench.json" 2>&1 | tee "$OUT/$1/bench.txt" | tail -3
}

copy_store() {
  python3 - "$DB" "$OUT/bench_store.sqlite3" <<'EOF'
import sqlite3, sys
src, dst = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
src.backup(dst)          # a consistent copy, -wal included
dst.close(); src.close()
print("store copied to", sys.argv[2])
EOF
}

for step in "$@"; do
  echo "== $step ($(date -u +%H:%M:%S))"
  case $step in
    setup1) install_wheels .whl1 ;;
    setup2) install_wheels .whl2 && python3 -c "import tilelang; print('tilelang', tilelang.__version__)" ;;
    remeasure)
      timeout "$STEP_S" python3 scripts/fidelity.py --kinds optimized --only "$ONLY" --compile-for none \
        --out "$OUT" --gap-out "$OUT/gap_remeasure" 2>&1 | tail -40 ;;
    handoff)
      timeout 120 python3 scripts/handoff_bench.py --reps 3 --json "$OUT/handoff_h200.json" 2>/dev/null ;;
    throughput)
      timeout "$STEP_S" python3 scripts/throughput.py --backend cuda \
        --tasks GELU,LayerNorm,Softmax,RMSNorm,AddReLU,RowSum --max 12 --fixtures none --serial 3 --per-gpu 4 \
        --variant "" --variant compile_outside_lane=1 --variant graph_replay=1 --variant stop_rule=interval \
        --variant precompute_reference=1 --env-steps Softmax,LayerNorm --out "$OUT" 2>&1 | tail -30 ;;
    throughput-levers)
      # every lever together beside the defaults, the light batch and then the full mix's first 16 (issue 35);
      # PARTS=light for the first only (one call shared with other steps)
      [[ " ${PARTS:-light full} " == *" light "* ]] && timeout "$STEP_S" python3 scripts/throughput.py --backend cuda \
        --tasks GELU,LayerNorm,Softmax,RMSNorm,AddReLU,RowSum --max 12 --fixtures none --serial 0 --per-gpu 4 \
        --variant "" --variant compile_outside_lane=1,graph_replay=1,stop_rule=interval,precompute_reference=1,launch_bound_after_compile=1 \
        --out "$OUT/light" 2>&1 | tail -12
      [[ " ${PARTS:-light full} " == *" full "* ]] && timeout $((STEP_S - 200)) python3 scripts/throughput.py --backend cuda --max 16 --serial 0 --per-gpu 4 \
        --variant "" --variant compile_outside_lane=1,graph_replay=1,stop_rule=interval,precompute_reference=1,launch_bound_after_compile=1 \
        --out "$OUT/full" 2>&1 | tail -12 ;;
    defaults-check)
      # #35: the defaults switched on 2026-12-06 evening (docs/measurement.md item 12) beside the old ones (OLD),
      # never run together as a row; PART light (default: the light batch, ~300 s) or full (the full mix's first
      # MAX, ~470 s with its library warm-up): one part per call. Each submission's status and E against OLD's
      OLD=clock_warmup_rule=fixed,warm_once=0,recheck_outside_exclusive=0,read_outputs_outside_lane=0,held_device_bytes=0
      case ${PART:-light} in
        light) part_args=(--tasks GELU,LayerNorm,Softmax,RMSNorm,AddReLU,RowSum --max 24 --fixtures none) ;;
        full) part_args=(--max "${MAX:-16}") ;;
        *) echo "defaults-check: PART must be light or full"; part_args=() ;;
      esac
      (( ${#part_args[@]} )) && timeout "$STEP_S" python3 scripts/throughput.py --backend cuda "${part_args[@]}" --serial 0 --per-gpu ${PER_GPU:-4} \
        --variant "$OLD" --variant "" --out "$OUT/defaults_${PART:-light}" 2>&1 | tail -${TAIL:-8} ;;
    full-levers)
      # #35's owed run: the first MAX (default 16) of the full mix (slow solutions and hostile fixtures included)
      # with the defaults and with every lane-time lever (ALL_NEW), side by side, each submission's status and
      # E against the defaults' in the report
      timeout "$STEP_S" python3 scripts/throughput.py --backend cuda --max ${MAX:-16} --serial 0 --per-gpu ${PER_GPU:-4} \
        --fixtures ${FIXTURES:-all} --variant "" --variant "$ALL_NEW" --out "$OUT/full" 2>&1 | tail -${TAIL:-30} ;;
    fidelity-levers)
      # #35's independent check of the levers' E (docs/measurement.md, item 11's "Still owed"): the optimized
      # Triton solutions of the light batch's tasks, each evaluated with the defaults, with every lever (ALL_NEW)
      # and with each lever group alone, all five compared with one do_bench of the kernel (scripts/fidelity.py
      # --variant; the per-variant summary prints last). Each group alone pins the other timing levers off, so that
      # it stays alone whichever of them the defaults turn on. FID_ONLY (Task/solution substrings, not remeasure's
      # ONLY: a bare "GELU" also picks BiasGELU, "RMSNorm" FusedAddRMSNorm and the backward tasks, and
      # the TileLang solutions that need setup2: 19 solutions) overrides the list. Sized from the docs: ~40 s a
      # solution for the defaults' fidelity (a warm evaluation ~10 s, do_bench's own process ~30 s), ~10 s for
      # each further variant: 6 x (40 + 4 x 10) = 480 s of STEP_S's 540; --deadline-s starts no solution after
      # STEP_S - 130 s, so that one started late still ends and the JSON is written
      mkdir -p "$OUT/fidelity_levers"
      timeout "$STEP_S" python3 scripts/fidelity.py --kinds optimized --compile-for none \
        --only "${FID_ONLY:-GELU/triton_blocked,LayerNorm/triton_rowwise,Softmax/triton_rowwise,RMSNorm/triton_rowwise,AddReLU/triton_blocked,RowSum/triton_tiled}" \
        --deadline-s $((STEP_S - 130)) --variant "" --variant "$ALL_NEW" \
        --variant clock_warmup_rule=steady,warm_once=1,recheck_outside_exclusive=0,graph_replay=0 \
        --variant recheck_outside_exclusive=1,clock_warmup_rule=fixed,warm_once=0,graph_replay=0 \
        --variant graph_replay=1,stop_rule=interval,clock_warmup_rule=fixed,warm_once=0,recheck_outside_exclusive=0 \
        --out "$OUT/fidelity_levers" 2>&1 | tee "$OUT/fidelity_levers/log.txt" | tail -${TAIL:-40} ;;
    throughput-new)
      # issue 35's levers of 2026-12-06 afternoon (the clock warm-up until steady, the warm-up once, the rechecks
      # after the exclusive lane, the check's reads before the lane and while the child times, the outputs held
      # on the device) beside the defaults, each row's E against the defaults' per submission, then the warm
      # env.step with the defaults and with all of them (ALL_NEW); the library warmed first (throughput.py
      # --warm-library auto); VARIANTS overrides the rows
      timeout "$STEP_S" python3 scripts/throughput.py --backend cuda \
        --tasks GELU,LayerNorm,Softmax,RMSNorm,AddReLU,RowSum --max 12 --fixtures none --serial 0 --per-gpu ${PER_GPU:-4} \
        --variant "" $(for v in ${VARIANTS:-clock_warmup_rule=steady,warm_once=1 recheck_outside_exclusive=1,read_outputs_outside_lane=1,held_device_bytes=1024M \
          $ALL_NEW}; do
          printf -- '--variant %s ' "$v"; done) ${ENV_STEPS:+--env-steps $ENV_STEPS --env-steps-variant $ALL_NEW} \
        --out "$OUT/light" 2>&1 | tail -${TAIL:-24} ;;
    lever-tests)
      # the GPU tests of issue 35's levers of 2026-12-06 afternoon (the steady clock warm-up, the device-held
      # outputs)
      timeout "${STEP_S:-200}" python3 -m pytest -q -s -m gpu -p no:cacheprovider \
        "tests/test_timing_levers.py::test_gpu_a_steady_warm_up_on_a_busy_gpu_ends_early_and_reads_the_clock" \
        "tests/test_gpu.py::test_outputs_held_on_the_device_reach_the_checker_the_same" 2>&1 | tail -${TAIL:-12} ;;
    ipc-probe)
      # #35's owed GPU probe of the IPC hand-over (the header): it ends itself at IPC_S and prints its tables
      # last (the parts' medians and p90s, the hostile rows, the design's assumed costs beside the measured)
      mkdir -p "$OUT/ipc_probe"
      timeout "$STEP_S" python3 scripts/ipc_probe.py --timeout-s "${IPC_S:-240}" \
        --json "$OUT/ipc_probe/ipc_probe.json" 2>&1 | tee "$OUT/ipc_probe/log.txt" | tail -${TAIL:-50} ;;
    replay)
      timeout "$STEP_S" python3 -m kernelgym_gap.cli.main bench --agent replay --tasks "$TASKS" \
        --backend "$BACKEND" --samples 1 --steps 1 --name "$LABEL" --db "$DB" --out "$OUT/bench" \
        --compile-baseline off 2>&1 | tail -15
      copy_store
      python3 -m kernelgym_gap.cli.main bench report "$LABEL" --db "$DB" --json > "$OUT/bench_replay.json" \
        2>"$OUT/bench_report.err" ;;
    slow)
      # RESUME: fidelity JSONs of earlier calls, committed or left in the working tree so that they travel
      timeout "$STEP_S" python3 scripts/fidelity.py --kinds slow --cap-ms 50 --deadline-s $((STEP_S - 150)) \
        --jobs "${JOBS:-3}" --compile-for none --out "$OUT" ${RESUME:+--resume $RESUME} 2>&1 | tail -60 ;;
    throughput-full)
      timeout "$STEP_S" python3 scripts/throughput.py --backend cuda --max 64 --serial 0 --per-gpu 4 \
        --out "$OUT" 2>&1 | tail -30 ;;
    kb-survey)
      # #36: the library times and floors of imported KernelBench tasks, the share under 20 us; KB_DIRS: the
      # imported task directories, carried (e.g. .scratch/kb/level1 .scratch/kb/level2: ignored by git);
      # SAMPLE (default all) seeded random tasks, so a call cut short is still an unbiased sample
      timeout "$STEP_S" python3 scripts/kb_library_times.py $(for d in ${KB_DIRS:?KB_DIRS names the imported dirs}; do
        printf -- '--tasks-dir %s ' "$d"; done) ${SAMPLE:+--sample $SAMPLE} --deadline-s $((STEP_S - 40)) \
        --out "$OUT/kb_library_times.json" 2>&1 | tail -${TAIL:-25} ;;
    merge-remeasure)
      CORPUS=${CORPUS:-results/h200_2026-12-04_corpus}
      BEST=${BEST:-kernelgym_gap/data/best_known.json}   # package data: what the diagnosis reads
      DEST=${DEST:-results/h200_$(date -u +%F)}
      [[ -n "${FILES:-}" && -f "${FILES:-}/gap_remeasure/gap_study_cuda.json" ]] \
        || { echo "merge-remeasure: FILES must name a remeasure call's files (FILES/gap_remeasure/...)"; exit 2; }
      python3 scripts/gap_study.py --merge "$CORPUS/gap_study_cuda.json" "$FILES/gap_remeasure/gap_study_cuda.json" \
        --out "$CORPUS" > "$CORPUS/gap_study_table.txt" || exit 1
      python3 scripts/gap_study.py --update-best-known "$CORPUS/best_known.json" "$BEST" || exit 1
      mkdir -p "$DEST"
      for f in "$FILES"/fidelity_*.json; do
        [[ -f "$f" ]] && cp "$f" "$DEST/remeasure_$(basename "$f")"
      done
      tail -3 "$CORPUS/gap_study_table.txt"
      echo "in $DEST: $(ls "$DEST" | tr '\n' ' ')" ;;
    gpu-tests)
      timeout "$STEP_S" python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_gpu_too_slow.py \
        -k "library_time or hopeless or tight_call or lanes or too_slow" 2>&1 | tail -15   # lanes: compile_outside_lane too; too_slow: issue 38
      # issue 35's levers: graph replay against the loop and its fallbacks, the early check on cuda
      timeout 200 python3 -m pytest -q -m gpu tests/test_timing_levers.py tests/test_early_check.py 2>&1 | tail -8 ;;
    owed-tests)
      # the cuda tests written since the last device run (docs/measurement.md "Still owed"): one pytest per test
      # (a hang or a kill loses only that test's report; 2026-12-06's first try lost every traceback to a
      # file-wide timeout), each under its own limit, the reports appended to $OUT/owed_tests.txt and one line
      # per test to $OUT/owed_summary.txt; FILES narrows the list, the step stops when STEP_S is spent
      FILES=${FILES:-"tests/test_deadlines.py tests/test_service.py tests/test_terms.py tests/test_lowbit_dtypes.py
        tests/test_gpu_fused_moe.py tests/test_gpu_top_p_sample.py tests/test_task_source.py tests/test_prestart.py
        tests/test_warm.py tests/test_placement.py tests/test_import_tolerance.py tests/test_gpu_moe_backward_tasks.py
        tests/test_gpu_tilelang_v2.py"}
      # PER_TEST: one test's limit (default 150 s). JOBS (default 1) tests at once: their timings still take the GPU's lane one at a time (lane_dir
      # "auto" is one directory per user and host), so only the compiles and correctness calls overlap
      end=$(( $(date +%s) + STEP_S ))
      mkdir -p "$OUT/owed"
      # one calibration and library cache for every test process of the step (tests/conftest.device_cache_dir)
      export KGG_GPU_TEST_CACHE_DIR=${KGG_GPU_TEST_CACHE_DIR:-/tmp/kgg_gpu_test_cache}
      run_node() {     # $1 the test node, $2 its order number; OUT, end from the step
        local left=$(( end - $(date +%s) )) log="$OUT/owed/$(printf %03d "$2").txt" t0 rc limit
        (( left > 20 )) || { echo "not run (time): $1" >> "$OUT/owed_summary.txt"; return; }
        limit=$(( left < ${PER_TEST:-150} ? left : ${PER_TEST:-150} ))
        echo "=== $1" > "$log"
        t0=$(date +%s)
        # faulthandler: a test killed at its limit still leaves its stack (2026-12-06 evening's MoE tests left none)
        timeout "$limit" python3 -m pytest -q -s -m gpu --tb=short -p no:cacheprovider \
          -o faulthandler_timeout=$(( limit > 30 ? limit - 15 : limit )) "$1" >> "$log" 2>&1
        rc=$?
        echo "rc=$rc $(( $(date +%s) - t0 ))s $1" | tee -a "$OUT/owed_summary.txt"
      }
      export -f run_node; export OUT end
      python3 -m pytest --collect-only -q -m gpu $FILES 2>/dev/null | grep '::' | nl -w1 -s' ' \
        | xargs -P "${JOBS:-1}" -L 1 bash -c 'run_node "$1" "$0"'
      cat "$OUT"/owed/*.txt >> "$OUT/owed_tests.txt" 2>/dev/null ;;
    ipc-probe-vmm)
      # #35: the VMM/fd route's GPU probe (the header); it ends itself at VMM_S and prints its tables last
      mkdir -p "$OUT/ipc_probe_vmm"
      timeout "$STEP_S" python3 scripts/ipc_probe_vmm.py --timeout-s "${VMM_S:-240}" \
        --json "$OUT/ipc_probe_vmm/ipc_probe_vmm.json" 2>&1 | tee "$OUT/ipc_probe_vmm/log.txt" | tail -${TAIL:-50}
      rc=$?
      if (( rc != 2 )); then    # 2: no CUDA here, where the gpu tests would only skip; the step keeps that status
        # the route's own gpu tests (round trip, across a pid namespace, a non-CUDA fd, the extent), report kept
        timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cuda_vmm.py \
          > "$OUT/ipc_probe_vmm/gpu_tests.txt" 2>&1; tail -3 "$OUT/ipc_probe_vmm/gpu_tests.txt"
      else (exit 2); fi ;;
    probe-fold)
      # #35: the premise first (its gpu test, 90 s at most), then the rows (the header)
      mkdir -p "$OUT/probe_fold"
      timeout 90 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
        "tests/test_probe_fold.py::test_gpu_the_probes_readings_read_the_kernel_as_the_full_timing_does" \
        > "$OUT/probe_fold/gpu_test.txt" 2>&1; tail -4 "$OUT/probe_fold/gpu_test.txt"
      timeout $(( STEP_S - 100 )) python3 scripts/throughput.py --backend cuda \
        --tasks GELU,LayerNorm,Softmax,RMSNorm,AddReLU,RowSum --max 24 --fixtures none --serial 0 --per-gpu 4 \
        --variant "" --variant probe_readings_count=1 --variant probe_readings_count=1,probe_hopeless_reps=3 \
        --out "$OUT/probe_fold" 2>&1 | tee "$OUT/probe_fold/log.txt" | tail -${TAIL:-24} ;;
    handover)
      # #35: the hand-over's wiring on the light batch, the defaults beside the flag (the header)
      light_beside handover hand_over_outputs=1 hand_over_outputs=1 20 24 ;;
    timing-release)
      # docs/security.md (2026-12-07): the timed outputs let go under watch and the timing bench guarded
      # (child/release.py). The two cuda fixtures and an honest kernel scored from the parent's summary (~3 min),
      # then E against one do_bench of each kernel with the defaults (the kept outputs change which blocks the
      # allocator hands out between repetitions; ~40 s a solution), FID_ONLY overriding the list
      mkdir -p "$OUT/timing_release"
      timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_hostile.py \
        -k "(test_gpu_hack and (bench_rep_shadow or finalizer_in_timing)) or test_gpu_an_honest_kernel_scores" \
        2>&1 | tee "$OUT/timing_release/tests.txt" | tail -6
      timeout $(( STEP_S - 250 )) python3 scripts/fidelity.py --kinds optimized --compile-for none \
        --only "${FID_ONLY:-LayerNorm/triton_rowwise,Softmax/triton_rowwise,GELU/triton_blocked,RowSum/triton_tiled}" \
        --deadline-s $(( STEP_S - 370 )) --variant "" --out "$OUT/timing_release" 2>&1 \
        | tee "$OUT/timing_release/fidelity_log.txt" | tail -${TAIL:-20} ;;
    handover-diag)
      # #35: where the hand-over's false non_finite of 2026-12-07 comes from (scripts/probes/handover_diag.py): the
      # mechanism without the engine, layer by layer, on the two solutions it failed (with and without the
      # checkpoints' exports), then the engine's gpu tests of those solutions (the recheck by files, and the
      # strict xfail that passes once the cause is mended); JSON and tables in $OUT/handover_diag/
      mkdir -p "$OUT/handover_diag"
      for case in "RowSum triton_tiled.py" "RowSum triton_tiled.py --no-checkpoints" "Attention triton_flash.py"; do
        set -- $case
        timeout 170 python3 scripts/probes/handover_diag.py --task "$1" --solution "$2" ${3:-} \
          --json "$OUT/handover_diag/$1${3:+_nocp}.json" 2>&1 | tee -a "$OUT/handover_diag/tables.txt" | tail -${TAIL:-30}
      done ;;
    handover-gpu-tests)
      # #35: the hand-over through the engine on the two solutions it once failed (ok with no recheck since the
      # arena's wait, 2026-12-07), the wait's hazard and regression, the arena's release, the child's hold
      # (its cache given back) and the digest's device sums in stretches (on every cuda evaluation's path)
      mkdir -p "$OUT/handover_diag"
      timeout $(( STEP_S - 20 )) python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short -s -rxX \
        tests/test_engine_handover.py tests/test_handover_check.py tests/test_child_handover.py \
        tests/test_inputs.py tests/test_library_warm.py 2>&1 \
        | tee "$OUT/handover_diag/gpu_tests.txt" | tail -16 ;;
    library-warm)
      # #35: the library's first calls before the exclusive lane on the full mix (the header)
      full_beside library_warm library_warm_before_lane=0 ;;
    handover-full)
      # #35: the hand-over's flag on the full mix's first MAX (16) beside the defaults (the header)
      full_beside handover_full hand_over_outputs=1 ;;
    light-warm)
      # #35: the library's first calls before the lane on the light batch (the header), with the warm env.step
      light_beside light_warm library_warm_before_lane=0 "${ENV_VARIANT:-library_warm_before_lane=0}" 20 24 ;;
    prestart-next)
      # #35: the slot's next job taken ahead and its child pre-started for it (Placement.prestart_for_next; the
      # header) on the full mix's first MAX (16): the defaults (on since 2026-12-07 15:30) beside the old order
      full_beside prestart_next prestart_for_next=0 ;;
    staging)
      # #35: the device copies written through a pinned buffer (the header), its gpu test first (60 s at most)
      mkdir -p "$OUT/staging"
      timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/test_tensor_file.py \
        tests/test_staging_bench.py > "$OUT/staging/gpu_test.txt" 2>&1; tail -3 "$OUT/staging/gpu_test.txt"
      # the mechanism alone: pageable against pinned, writes and reads (scripts/staging_bench.py, ~30 s)
      timeout 90 python3 scripts/staging_bench.py --json "$OUT/staging/staging_bench.json" 2>&1 \
        | tee "$OUT/staging/staging_bench.txt" | tail -5
      light_beside staging output_staging_bytes=64M output_staging_bytes=64M 110 28 ;;
    read-arena)
      # #35: the warm checker's read arena (Placement.read_arena_bytes, OFF; the header): the bench on this host
      # first, then the light batch and, with ENV_STEPS, the warm env.step, the defaults beside it
      arena_bench read_arena 24 5 150
      light_beside read_arena read_arena_bytes=3072M read_arena_bytes=3072M 170 30 ;;
    early-gpu)
      # #35: the early-started child on cuda (tests/test_prestart_early.py's gpu test) and the read arena's bench on
      # this host (~150 s together)
      mkdir -p "$OUT/early_gpu"
      timeout 240 python3 -m pytest -q -s -m gpu -p no:cacheprovider --tb=short tests/test_prestart_early.py \
        > "$OUT/early_gpu/gpu_test.txt" 2>&1; tail -4 "$OUT/early_gpu/gpu_test.txt"
      arena_bench early_gpu 16 3 80 ;;
    arena-steps)
      # #35: the warm env.step of ENV_STEPS (default Softmax,LayerNorm) with the defaults and with the read arena
      # (read_arena_bytes=3072M), after a two-evaluation batch of each, and the bench on this host first (~40 s)
      [ "${BENCH:-1}" = 0 ] || arena_bench arena_steps 24 3 90
      steps_beside arena_steps read_arena_bytes=3072M "${BENCH_S:-110}" ;;
    prestart-early)
      # #35: the slot's next child's process started as its child starts and given its task as that child ends
      # (Placement.prestart_early, OFF; the header) on the full mix's first MAX (16), beside the defaults
      full_beside prestart_early prestart_early=1 ;;
    staging-bench)
      mkdir -p "$OUT/staging"
      timeout 90 python3 scripts/staging_bench.py --json "$OUT/staging/staging_bench.json" 2>&1 \
        | tee "$OUT/staging/staging_bench.txt" | tail -12 ;;
    staging-serial)
      # #35: the pinned staging buffer's E against the one-at-a-time path (--serial 13: the whole light batch, run
      # first, then the defaults and the buffer beside each other); 2026-12-07 saw E move 7% and 12% between the
      # two lane variants, past the day's 0.86-1.8%, and the goal is E within 2% of the serial path
      SERIAL=${SERIAL:-13} light_beside staging_serial output_staging_bytes=64M "" 20 34 ;;
    staging-steps)
      # #35: the warm env.step of ENV_STEPS (default Softmax,LayerNorm) with the defaults and with the pinned
      # staging buffer (the header's staging), after a two-evaluation batch of each (the batch is not the point)
      steps_beside staging_steps output_staging_bytes=64M 20 ;;
    library-trust)
      # #35: the library check amortized (TimingConfig.library_check_shapes, OFF; the header)
      mkdir -p "$OUT/library_trust"
      timeout 200 python3 -m pytest -q -s -m gpu -p no:cacheprovider --tb=short tests/test_library_trust.py \
        > "$OUT/library_trust/gpu_test.txt" 2>&1; tail -12 "$OUT/library_trust/gpu_test.txt"
      light_beside library_trust library_check_shapes=1 library_check_shapes=1 230 30 ;;
    staging-laned)
      # #35: the staging buffer's E with and without its copies under the shared lane, against the serial path
      mkdir -p "$OUT/staging_laned"
      timeout $(( STEP_S - 20 )) python3 scripts/throughput.py --backend cuda \
        --tasks GELU,LayerNorm,Softmax,RMSNorm,AddReLU,RowSum --max 24 --fixtures none --serial ${SERIAL:-6} \
        --per-gpu 4 --variant "" --variant outputs_copy_laned=0 --variant output_staging_bytes=0,outputs_copy_laned=0 \
        --out "$OUT/staging_laned" 2>&1 | tee "$OUT/staging_laned/log.txt" | tail -${TAIL:-40} ;;
    new-levers)
      # #35: the switches built off since 2026-12-07 together (NEW_OFF; the header), the defaults beside them
      light_beside new_levers "$NEW_OFF" "$NEW_OFF" 20 34 ;;
    warmup-short)
      # #35: the probe's warm-ups at 5 ms of GPU time instead of 25 (TimingConfig.warmup_ms; the header): E first
      mkdir -p "$OUT/warmup_short"
      timeout $(( STEP_S - 20 )) python3 scripts/fidelity.py --kinds optimized --compile-for none \
        --only "${FID_ONLY:-GELU/triton_blocked,LayerNorm/triton_rowwise,Softmax/triton_rowwise,RMSNorm/triton_rowwise,AddReLU/triton_blocked,RowSum/triton_tiled}" \
        --deadline-s $(( STEP_S - 130 )) --variant "" --variant warmup_ms=5 \
        --out "$OUT/warmup_short" 2>&1 | tee "$OUT/warmup_short/log.txt" | tail -${TAIL:-25} ;;
    warmup-light)
      # #35: the light batch with the defaults and warmup_ms=5 side by side (after warmup-short's E)
      light_beside warmup_light warmup_ms=5 warmup_ms=5 20 30 ;;
    *) echo "unknown step $step (see the header of $0)"; exit 2 ;;
  esac
done
