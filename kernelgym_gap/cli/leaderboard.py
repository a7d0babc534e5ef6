"""Commands over the results store: `submit`, `results`, `leaderboard serve|worker|show`.

Added to `kernelgym-gap` by cli/main.py through add_commands(subparsers). Imports stay lazy: the web stack
(starlette, jinja2, uvicorn: the `web` extra) is imported only by `leaderboard serve`.

The database is --db, else $KERNELGYM_GAP_DB, else ~/.local/share/kernelgym_gap/results.sqlite3
($XDG_DATA_HOME is honoured). The server's write token is --token, else $KERNELGYM_GAP_TOKEN, else a
random one printed at start (a chosen token is never printed). `submit` applies the web's name rule
(store/names.py) and refuses a bad kernel path with a usage error (exit 2) before evaluating anything.
"""
from __future__ import annotations

import json
import os
import secrets
import sys

from kernelgym_gap.cli.options import BACKEND_HELP, DSL_HELP, REWARD_MODE_HELP, SEED_HELP
from kernelgym_gap.core import dsls
from kernelgym_gap.core.terminal import for_terminal, one_line
from kernelgym_gap.core.terms import Headline

TOKEN_ENV = "KERNELGYM_GAP_TOKEN"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _db_arg(p) -> None:
    p.add_argument("--db", help="results database (default: $KERNELGYM_GAP_DB, else "
                                "~/.local/share/kernelgym_gap/results.sqlite3)")


def add_commands(sub) -> None:
    s = sub.add_parser("submit", help="evaluate one kernel file and store the result (served from the cache "
                                      "when this source was measured before with the same settings)")
    s.add_argument("--task", required=True, help="task id or name")
    s.add_argument("--name", required=True, help="who submits: agent or checkpoint name")
    s.add_argument("--dsl", default=dsls.DEFAULT, choices=dsls.NAMES, help=DSL_HELP)
    s.add_argument("--backend", default="auto", choices=["cpu", "cuda", "auto"], help=BACKEND_HELP)
    s.add_argument("--reward-mode", choices=["full", "correctness"], help=REWARD_MODE_HELP)
    s.add_argument("--seed", type=int, help=SEED_HELP + "; part of the cache key")
    s.add_argument("--gpu", type=int, help="GPU index for the cuda backend")
    s.add_argument("--remeasure", action="store_true", help="evaluate again even if the cache has a result")
    s.add_argument("--json", action="store_true", help="print one JSON object: submission id, cache hit, record")
    _db_arg(s)
    s.add_argument("file", help="the kernel source file")
    from kernelgym_gap.cli.options import add_tasks_dir
    add_tasks_dir(s)
    s.set_defaults(func=cmd_submit)

    s = sub.add_parser("results", help="list stored submissions, newest first")
    s.add_argument("--task", help="only this task (id or name; default: every task)")
    s.add_argument("--name", help="only this submitter")
    s.add_argument("--limit", type=int, default=20, help="at most this many submissions")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    _db_arg(s)
    s.set_defaults(func=cmd_results)

    lb = sub.add_parser("leaderboard", help="the local leaderboard (web app, worker, terminal view)")
    lsub = lb.add_subparsers(dest="leaderboard_command", required=True)
    s = lsub.add_parser("serve", help="serve the leaderboard web app (and start its evaluation worker)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    s.add_argument("--port", type=int, default=8000, help="port to listen on")
    s.add_argument("--backend", default="auto", choices=["cpu", "cuda", "auto"],
                   help="what web submissions are evaluated on")
    s.add_argument("--token", help=f"write token (default: ${TOKEN_ENV}, else a random one, printed)")
    s.add_argument("--workers", type=int, default=1, help="evaluations at once in the worker")
    s.add_argument("--no-worker", action="store_true",
                   help="do not start a worker (run `leaderboard worker` yourself, e.g. on the GPU host)")
    _db_arg(s)
    s.set_defaults(func=cmd_serve)

    s = lsub.add_parser("worker", help="evaluate queued web submissions (in the foreground)")
    s.add_argument("--backend", default="auto", choices=["cpu", "cuda", "auto"], help=BACKEND_HELP)
    s.add_argument("--workers", type=int, default=1, help="evaluations at once")
    _db_arg(s)
    s.set_defaults(func=cmd_worker)

    s = lsub.add_parser("show", help="print the overall ranking, or one task's ranking")
    s.add_argument("--task", help="one task's ranking (id or name; default: the overall ranking)")
    s.add_argument("--backend", choices=["cpu", "cuda"], help="default: cuda if it has results, else cpu")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of the ranking")
    _db_arg(s)
    s.set_defaults(func=cmd_show)


def _store(args, evaluates: bool = False):
    """The store; for a command that evaluates submissions (`evaluates`), a database they could read is
    refused first (sandbox/exposure.py: ExposedFileError, exit 2, with the reason and the fix)."""
    from kernelgym_gap.store.db import Store, resolve_db_path
    path = resolve_db_path(args.db)
    if evaluates:
        from kernelgym_gap.sandbox.exposure import check_private
        check_private(path)             # an existing file as it is, before it is opened
    store = Store(path)
    if evaluates:
        check_private(path)             # and one just created (0600, unless its directory says otherwise)
    return store


def cmd_submit(args) -> int:
    from kernelgym_gap.cli.options import eval_config, placement, read_source, task_registry
    from kernelgym_gap.api.cached import cached_evaluate_full
    from kernelgym_gap.store.names import submitter_name
    name = submitter_name(args.name)             # the web's rule, checked before anything is evaluated
    source = read_source(args.file)
    task = task_registry(args).get(args.task)
    store = _store(args, evaluates=True)
    res = cached_evaluate_full(store, task, source, args.dsl, args.backend, eval_config(args), name,
                               remeasure=args.remeasure, origin="cli", placement=placement(args))
    r = res.record
    if args.json:
        print(json.dumps({"submission": res.submission_id, "cache_hit": res.cache_hit,
                          "evaluation": res.evaluation_id, "db": str(store.path), "record": r.to_dict()}))
        return 0
    how = f"served from the cache (evaluation #{res.evaluation_id})" if res.cache_hit else "evaluated"
    print(f"submission #{res.submission_id} by {one_line(name)}: {r.task} dsl={r.dsl} backend={r.backend}, {how}")
    print(f"status: {r.status.value}  correct: {r.correct}  reward: {r.reward:.4f}  ({r.reward_mode})")
    if r.message:                    # the submission's own text: escaped (core/terminal.py)
        print(for_terminal(r.message))
    t = Headline.of(r.terms)
    if t.E is not None:
        print(f"E={t.E:.4g}  U={t.U:.4g}  performance={t.performance or 0:.4f}")
    if r.diagnosis:
        print(f"diagnosis: {r.diagnosis.get('verdict')}: {for_terminal(r.diagnosis.get('summary', ''))}")
    print(f"stored in {store.path}")
    return 0


def cmd_results(args) -> int:
    from kernelgym_gap.web import board
    store = _store(args)
    task_id = _stored_task(store, args.task) if args.task else None
    page = board.submissions_list(store, 1, max(1, args.limit), task_id=task_id, submitter=args.name)
    if args.json:
        print(store_dumps(page.to_dict()))
        return 0
    print(f"{'id':>6} {'submitter':20s} {'task':16s} {'backend':7s} {'state':7s} {'status':18s} {'reward':>7s} "
          f"{'E':>7s} {'U':>7s} cached")
    for s in page.items:
        print(f"{s['id']:>6} {one_line(s['submitter'])[:20]:20s} {one_line(s['task'])[:16]:16s} {s['backend']:7s} {s['state']:7s} "
              f"{(s['status'] or '-'):18s} {_n(s['reward'], 4):>7s} {_n(s['e']):>7s} {_n(s['u']):>7s} "
              f"{'yes' if s['cache_hit'] else ''}")
    print(f"{page.total} submission(s) in {store.path}")
    return 0


def _stored_task(store, text: str) -> str:
    """The task id `results --task` means: an id, or a name in any case (its newest version), among the
    registered tasks and those the store's submissions name (a user's --tasks-dir tasks, which the
    registry of tasks/ does not know). Neither: UnknownTaskError, with the near matches."""
    from kernelgym_gap.core import ids
    from kernelgym_gap.core.errors import UnknownTaskError
    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.store.leaderboard import stored_task_ids
    known = sorted(set(stored_task_ids(store)) | set(default_registry().ids()))
    folded = text.strip().casefold()
    exact = [k for k in known if k.casefold() in (folded, ids.full(text.strip()).casefold())]
    if exact:
        return exact[0]
    by_name = [k for k in known if (ids.parse(k) or ("", None))[0].casefold() == folded]
    if by_name:
        return max(by_name, key=lambda k: (ids.parse(k) or ("", -1))[1] or 0)
    raise UnknownTaskError(text, known + sorted({(ids.parse(k) or (k,))[0] for k in known}))


def store_dumps(value) -> str:
    from kernelgym_gap.store.db import dumps
    return dumps(value)


def _n(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}" if digits != 4 else f"{x:.4f}"


def cmd_show(args) -> int:
    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.web import board
    store = _store(args)
    backend = args.backend or board.default_backend(store)
    if args.task:
        task_id = default_registry().get(args.task).id
        page = board.task_ranking(store, task_id, backend, 1, board.MAX_PER_PAGE)
        if args.json:
            print(store_dumps({"task": task_id, "backend": backend, **page.to_dict()}))
            return 0
        print(f"{task_id} on {backend}")
        for r in page.items:
            print(f"{r['rank']:>3}. {one_line(r['submitter'])[:24]:24s} reward={_n(r['reward'], 4)} E={_n(r['e'])} "
                  f"U={_n(r['u'])} {r['verdict'] or r['status']}  #{r['id']} {r['submitted_at']}")
        return 0
    page = board.overall_ranking(store, backend, default_registry().ids(), 1, board.MAX_PER_PAGE)
    if args.json:
        print(store_dumps({"backend": backend, **page.to_dict()}))
        return 0
    print(f"overall ranking on {backend} ({store.path})")
    for r in page.items:
        print(f"{r['rank']:>3}. {one_line(r['submitter'])[:24]:24s} score={_n(r['score'], 4)} "
              f"correct={r['tasks_correct']}/{r['tasks_total']} E={_n(r['E'])} U={_n(r['U'])} "
              f"submissions={r['submissions']}")
    return 0


def _resolve_backend(backend: str) -> str:
    from kernelgym_gap.engine.pipeline import resolve_backend
    return resolve_backend(backend)


def cmd_worker(args) -> int:
    from kernelgym_gap.web import worker
    argv = ["--backend", _resolve_backend(args.backend), "--threads", str(args.workers)]
    if args.db:
        argv += ["--db", args.db]
    return worker.main(argv)


def cmd_serve(args) -> int:
    try:
        from kernelgym_gap.web.app import create_app
        from kernelgym_gap.web.server import serve
    except ImportError as e:
        print(f"kernelgym-gap: the leaderboard needs the web extra (pip install -e '.[web]'): {e}",
              file=sys.stderr)
        return 3
    from kernelgym_gap.store.db import resolve_db_path
    backend = _resolve_backend(args.backend)
    store = _store(args, evaluates=not args.no_worker)
    token, origin = args.token, "--token"
    if not token and os.environ.get(TOKEN_ENV):
        token, origin = os.environ[TOKEN_ENV], f"${TOKEN_ENV}"
    generated = not token
    if generated:
        token, origin = secrets.token_urlsafe(18), "generated"
    if args.host not in LOOPBACK:
        print(f"warning: listening on {args.host}: the leaderboard is reachable from other machines; "
              "reads are open to them, writes need the token", file=sys.stderr)
    app = create_app(store, token, backend=backend)
    worker = None
    if not args.no_worker:     # supervised: reaped, restarted with backoff, its liveness in /api/health
        from kernelgym_gap.web.supervise import WorkerSupervisor
        cmd = [sys.executable, "-m", "kernelgym_gap.web.worker", "--db", str(resolve_db_path(args.db).resolve()),
               "--backend", backend, "--threads", str(args.workers), "--parent-pid", str(os.getpid())]
        worker = WorkerSupervisor(cmd).start()
        app.state.settings.worker = worker
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"leaderboard: http://{host}:{args.port}/  (db {store.path}; submissions evaluated on {backend} "
          f"by {'worker pid %d' % worker.pid if worker else 'no worker: run `kernelgym-gap leaderboard worker`'})",
          file=sys.stderr, flush=True)
    if generated:      # the only copy: the operator needs it (a chosen token is never written to the log)
        print(f"write token: {token}  (generated; set --token or ${TOKEN_ENV} to choose one)",
              file=sys.stderr, flush=True)
    else:
        print(f"write token: from {origin} (not shown)", file=sys.stderr, flush=True)
    try:
        serve(app, args.host, args.port)
    except KeyboardInterrupt:           # uvicorn re-raises the Ctrl-C that stopped it
        pass
    finally:
        if worker is not None:
            worker.stop(timeout=10)
    return 0
