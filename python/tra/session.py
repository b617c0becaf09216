"""Where programs run: a tra service over HTTP, or the ``tra run`` command.

:func:`connect` sets the default :class:`Session` (``$TRA_URL``, else
``http://127.0.0.1:8080``); :func:`connect_local` one that runs ``tra run``
on this machine, which has no limit on the size of results (the service
returns at most 10,000 floats per output).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .expr import Builder, Expr, TraError

DEFAULT_URL = "http://127.0.0.1:8080"


def build_program(exprs: Sequence[Expr], sites: Optional[int]) -> Tuple[dict, Dict[str, np.ndarray], List[str],
                                                                       Builder]:
    """The TRA program of `exprs` (outputs in order), its input data, the
    output node names and the builder (for error attribution)."""
    b = Builder()
    outs = [b.name_of(e) for e in exprs]
    # An output that is an input as given gets an identity node (tra outputs nodes).
    for i, name in enumerate(outs):
        if name in b.inputs:
            outs[i] = b.transform("array", name, "scale(1.0)")
    prog: dict = {"inputs": b.inputs, "nodes": b.nodes, "outputs": list(dict.fromkeys(outs))}
    if sites is not None:
        prog["cluster"] = {"sites": int(sites)}
    return prog, b.data, outs, b


def _float(x: Any) -> float:
    return float(x) if not isinstance(x, str) else float({"Infinity": "inf", "-Infinity": "-inf"}.get(x, x))


def _dense_json(arr: np.ndarray) -> Any:
    if np.isfinite(arr).all():
        return arr.tolist()
    return np.vectorize(lambda v: v if math.isfinite(v) else ("NaN" if math.isnan(v) else
                                                              ("Infinity" if v > 0 else "-Infinity")),
                        otypes=[object])(arr).tolist()


def _shape_result(e: Expr, value: np.ndarray) -> np.ndarray:
    """The service's dense value in the expression's numpy shape."""
    return np.asarray(value, dtype=np.float64).reshape(e.shape)


class Session:
    """A connection to tra: a service URL, or a local ``tra`` binary."""

    def __init__(self, url: Optional[str] = None, binary: Optional[str] = None, sites: Optional[int] = None,
                 timeout: float = 300.0):
        self.url = None if binary else (url or os.environ.get("TRA_URL") or DEFAULT_URL).rstrip("/")
        self.binary = binary
        self.sites = sites
        self.timeout = timeout

    def __repr__(self) -> str:
        where = self.url or f"tra run ({self.binary})"
        return f"tra.Session({where})"

    # ------------------------------------------------------------ transport
    def _post(self, path: str, body: dict, builder: Builder) -> dict:
        data = json.dumps(body, allow_nan=False).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as err:
            raise _service_error(err.read(), builder, f"POST {path} answered {err.code}") from None
        except urllib.error.URLError as err:
            raise TraError("connect", f"cannot reach tra at {self.url}: {err.reason} "
                                      f"(start `tra serve`, or set TRA_URL / call tra.connect(url))") from None

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
        prog, data, outs, b = build_program(exprs, self.sites)
        if self.url:
            body = dict(prog, data={n: {"dense": _dense_json(a)} for n, a in data.items()})
            answer = self._post("/v1/execute", body, b)
            values = []
            for e, name in zip(exprs, outs):
                o = answer["outputs"][name]
                if "data" not in o:
                    raise TraError(e.op, f"the result has {o.get('floats')} floats, more than the service returns "
                                         f"(10,000); run it with tra.connect_local(path to tra)")
                values.append(_shape_result(e, np.vectorize(_float, otypes=[float])(np.asarray(o["data"],
                                                                                               dtype=object))))
            return values
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "program.json")
            with open(path, "w") as f:
                json.dump(prog, f)
            args = ["run", "--format", "json", "--no-progress", path]
            for n, a in data.items():
                np.save(os.path.join(d, f"{n}.npy"), a)
                args += ["--input", f"{n}={os.path.join(d, n + '.npy')}"]
            for n in dict.fromkeys(outs):
                args += ["--output", f"{n}={os.path.join(d, 'out-' + n + '.npy')}"]
            self._local(args, b)
            return [_shape_result(e, np.load(os.path.join(d, f"out-{n}.npy"))) for e, n in zip(exprs, outs)]


def _service_error(body: bytes, builder: Builder, fallback: str) -> TraError:
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return TraError("tra", f"{fallback}: {body[:500]!r}")
    at = str(err.get("at") or "")
    node = at.split(".")[0]
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


def connect_local(binary: str = "tra", sites: Optional[int] = None) -> Session:
    """Run programs with ``tra run`` (the `binary`) on this machine from now on."""
    global _default
    _default = Session(binary=binary, sites=sites)
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
