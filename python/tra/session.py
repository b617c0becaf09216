"""Where programs run: a tra service over HTTP, or the ``tra run`` command.

:func:`connect` sets the default :class:`Session` (``$TRA_URL``, else
``http://127.0.0.1:8080``); :func:`connect_local` one that runs ``tra run``
on this machine.

Data travels as ``.npy`` files both ways: to the service as base64 inside
the JSON body (``{"npy": ...}`` per input, bounded by ``tra serve
--max-body-bytes``), results asked with ``"return": {"format": "npy"}``
(bounded by ``--max-return-floats``); to ``tra run`` as files. Inputs keep
float32 when every input is float32 (the results are then float32);
anything else is sent as float64.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import os
import subprocess
import sys
import tempfile
import urllib.parse
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .expr import Builder, Expr, TraError, user_names

DEFAULT_URL = "http://127.0.0.1:8080"


def build_program(exprs: Sequence[Expr], sites: Optional[int]) -> Tuple[dict, Dict[str, np.ndarray], List[str],
                                                                       Builder]:
    """The TRA program of `exprs` (outputs in order), its input data, the
    output node names and the builder (for error attribution)."""
    b = Builder(user_names())
    outs = [b.name_of(e) for e in exprs]
    # An output that is an input as given gets an identity node (tra outputs nodes).
    for i, name in enumerate(outs):
        if name in b.inputs:
            outs[i] = b.transform("array", name, "scale(1.0)")
    prog: dict = {"inputs": b.inputs, "nodes": b.nodes, "outputs": list(dict.fromkeys(outs))}
    if sites is not None:
        prog["cluster"] = {"sites": int(sites)}
    return prog, b.data, outs, b


def _wire_dtype(data: Dict[str, np.ndarray]) -> np.dtype:
    """float32 when every input is float32, else float64 (tra computes in one type)."""
    if data and all(np.asarray(a).dtype == np.float32 for a in data.values()):
        return np.dtype("<f4")
    return np.dtype("<f8")


def _npy_bytes(arr: np.ndarray, dtype: np.dtype) -> bytes:
    """A .npy file of `arr` as `dtype`, little-endian, C order (what tra reads)."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr, dtype=dtype, order="C"), allow_pickle=False)
    return buf.getvalue()


def _npy_json(arr: np.ndarray, dtype: np.dtype) -> dict:
    return {"npy": base64.b64encode(_npy_bytes(arr, dtype)).decode("ascii")}


def _shape_result(e: Expr, value: np.ndarray) -> np.ndarray:
    """A dense result in the expression's numpy shape (and its dtype, if it has one)."""
    out = np.asarray(value).reshape(e.shape)
    dtype = getattr(e, "dtype", None)
    return out if dtype is None else out.astype(dtype)


class Session:
    """A connection to tra: a service URL, or a local ``tra`` binary."""

    def __init__(self, url: Optional[str] = None, binary: Optional[str] = None, sites: Optional[int] = None,
                 timeout: float = 300.0, processes: Optional[int] = None):
        self.url = None if binary else (url or os.environ.get("TRA_URL") or DEFAULT_URL).rstrip("/")
        self.binary = binary
        self.sites = sites
        self.timeout = timeout
        #: ``tra run --processes N``: the plan runs across N local processes.
        self.processes = processes
        if processes is not None and not binary:
            raise TraError("connect", "processes= is for tra.connect_local; a service runs where it was "
                                      "started (tra serve --hosts for a cluster)")
        #: ``tra run``'s plans by program text: a program run before is not optimized again.
        self._plans: Dict[str, dict] = {}
        #: The last answer (service) or report (``tra run``) of :meth:`compute`.
        self.last_report: Optional[dict] = None
        #: Whether the last local :meth:`compute` found its program's plan chosen before.
        self.plan_cache_hit = False

    def __repr__(self) -> str:
        where = self.url or f"tra run ({self.binary})"
        return f"tra.Session({where})"

    # ------------------------------------------------------------ transport
    def _post(self, path: str, body: dict, builder: Builder) -> dict:
        data = json.dumps(body, allow_nan=False).encode()
        where = urllib.parse.urlsplit(self.url)
        unreachable = "(start `tra serve`, or set TRA_URL / call tra.connect(url))"
        conn_class = http.client.HTTPSConnection if where.scheme == "https" else http.client.HTTPConnection
        conn = conn_class(where.netloc, timeout=self.timeout)
        try:
            try:
                conn.request("POST", where.path + path, body=data, headers={"Content-Type": "application/json"})
            except (BrokenPipeError, ConnectionResetError):
                # The service answered before reading the whole body (a
                # 413 past --max-body-bytes): read what it said.
                pass
            try:
                r = conn.getresponse()
                status, answer = r.status, r.read()
            except (OSError, http.client.HTTPException) as err:
                raise TraError("connect", f"tra at {self.url} closed the connection while {len(data):,} bytes were "
                                          f"sent ({err!r}); if that is more than its --max-body-bytes (default 4 "
                                          f"MiB), start it with a larger one {unreachable}") from None
        except OSError as err:
            raise TraError("connect", f"cannot reach tra at {self.url}: {err} {unreachable}") from None
        finally:
            conn.close()
        if status >= 400:
            raise _service_error(answer, builder, f"POST {path} answered {status}", self.url)
        try:
            return json.loads(answer)
        except ValueError:
            raise TraError("tra", f"POST {path} answered {status} with no JSON: {answer[:200]!r}") from None

    def _local(self, args: List[str], builder: Builder) -> str:
        try:
            r = subprocess.run([self.binary, *args], capture_output=True, text=True, timeout=self.timeout)
        except FileNotFoundError:
            raise TraError("connect", f"no tra binary at {self.binary}") from None
        if r.returncode != 0:
            raise _local_error(r.stderr, builder)
        return r.stdout

    # ------------------------------------------------------------------ API
    def optimize(self, exprs: Sequence[Expr]) -> dict:
        """tra's optimize answer for the program of `exprs` (plan, cost, alternatives)."""
        prog, _, _, b = build_program(exprs, self.sites)
        if self.url:
            return self._post("/v1/optimize", prog, b)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "program.json")
            with open(path, "w") as f:
                json.dump(prog, f)
            return json.loads(self._local(["optimize", "--format", "json", path], b))

    def explain(self, exprs: Sequence[Expr], file: Any = None) -> dict:
        """Print the chosen plan and the alternatives of computing `exprs`."""
        a = self.optimize(exprs)
        out = file or sys.stdout
        alts = a.get("alternatives", [])
        cost = a.get("cost", {})
        if alts:
            print(f"chosen plan: {alts[0]['label']}", file=out)
        print(f"cost: {cost.get('network_floats', 0):,} network floats, {cost.get('flops', 0):,} flops", file=out)
        print("alternatives, cheapest first:", file=out)
        for alt in alts:
            print(f"  {alt['cost']['network_floats']:>16,} floats  {alt['label']}", file=out)
        rules = a.get("rules_applied")
        if rules:
            print(f"rules applied: {', '.join(rules)}", file=out)
        return a

    def compute(self, exprs: Sequence[Expr]) -> List[np.ndarray]:
        """Run the program of `exprs` and return their values, in order."""
        # `tra run --processes N` runs on N sites unless told more: plan for those.
        sites = self.sites if self.sites is not None or self.url else self.processes
        prog, data, outs, b = build_program(exprs, sites)
        wire = _wire_dtype(data)
        if self.url:
            body = dict(prog, data={n: _npy_json(a, wire) for n, a in data.items()},
                        **{"return": {"format": "npy", "dtype": "float32" if wire == np.float32 else "float64"}})
            answer = self._post("/v1/execute", body, b)
            self.last_report = answer
            values = []
            for e, name in zip(exprs, outs):
                o = answer.get("outputs", {}).get(name, {})
                if "npy" not in o:
                    raise TraError("tra", f"the service at {self.url} answered output {name} without `npy` "
                                          f"(keys: {sorted(o)}): it does not return .npy results; upgrade "
                                          f"tra serve, or use tra.connect_local(path to tra)")
                try:
                    value = np.load(io.BytesIO(base64.b64decode(o["npy"], validate=True)), allow_pickle=False)
                except ValueError as err:
                    raise TraError("tra", f"the service's .npy for output {name} does not load: {err}") from None
                values.append(_shape_result(e, value))
            return values
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "program.json")
            with open(path, "w") as f:
                json.dump(prog, f)
            args = ["run", "--format", "json", "--no-progress", path]
            if self.processes is not None:
                args += ["--processes", str(int(self.processes))]
            # The plan is chosen once per program text (`tra optimize`), then
            # given to `tra run --plan`: a program run before is not optimized again.
            text = json.dumps(prog, sort_keys=True)
            self.plan_cache_hit = text in self._plans
            if not self.plan_cache_hit:
                self._plans[text] = json.loads(self._local(["optimize", "--format", "json", path], b))["plan"]
            with open(os.path.join(d, "plan.json"), "w") as f:
                json.dump(self._plans[text], f)
            args += ["--plan", os.path.join(d, "plan.json")]
            for n, a in data.items():
                np.save(os.path.join(d, f"{n}.npy"), np.asarray(a, dtype=wire, order="C"), allow_pickle=False)
                args += ["--input", f"{n}={os.path.join(d, n + '.npy')}"]
            for n in dict.fromkeys(outs):
                args += ["--output", f"{n}={os.path.join(d, 'out-' + n + '.npy')}"]
            report = json.loads(self._local(args, b))
            self.last_report = report
            return [_shape_result(e, np.load(os.path.join(d, f"out-{n}.npy"))) for e, n in zip(exprs, outs)]


def _service_error(body: bytes, builder: Builder, fallback: str, url: Optional[str] = None) -> TraError:
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return TraError("tra", f"{fallback}: {body[:500]!r}")
    at = str(err.get("at") or "")
    if err.get("code") == "bad_field" and at == "return":
        # A service from before .npy answers refuses the field by name.
        return TraError("tra", f"the service at {url} is too old for this client: it does not know `return` "
                               f"(results as .npy); upgrade tra serve, or use tra.connect_local(path to tra) "
                               f"[{err.get('message')}]")
    parts = at.split(".")
    node = parts[1] if parts[0] == "data" and len(parts) > 1 else parts[0]  # data.INPUT names the input
    op = builder.origin.get(node, "tra")
    return TraError(op, f"{err.get('message')} [{err.get('code')} at {at or 'the program'}]")


def _local_error(stderr: str, builder: Builder) -> TraError:
    for name, op in builder.origin.items():
        if f"`{name}`" in stderr or f"'{name}'" in stderr or f"{name}." in stderr:
            return TraError(op, stderr.strip())
    return TraError("tra run", stderr.strip())


_default: Optional[Session] = None


def connect(url: Optional[str] = None, sites: Optional[int] = None) -> Session:
    """Use the tra service at `url` (default ``$TRA_URL``, else
    ``http://127.0.0.1:8080``) from now on; `sites` sets the cluster size the
    plan is chosen for (the service's default otherwise)."""
    global _default
    _default = Session(url=url, sites=sites)
    return _default


def connect_local(binary: str = "tra", sites: Optional[int] = None, processes: Optional[int] = None) -> Session:
    """Run programs with ``tra run`` (the `binary`) on this machine from now
    on: on worker threads, or across `processes` local processes (timely
    dataflow over loopback). A program run before reuses its plan."""
    global _default
    _default = Session(binary=binary, sites=sites, processes=processes)
    return _default


def default_session() -> Session:
    """The session of the last :func:`connect`, else one for ``$TRA_URL``."""
    global _default
    if _default is None:
        _default = Session()
    return _default


def compute(*exprs: Expr, session: Optional[Session] = None) -> List[np.ndarray]:
    """Compute several expressions in one program (shared parts once)."""
    for e in exprs:
        if not isinstance(e, Expr):
            raise TraError("compute", f"expected tra expressions, got {type(e).__name__}")
    return (session or default_session()).compute(list(exprs))
