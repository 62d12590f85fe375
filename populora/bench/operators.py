"""`populora bench operators`: time to make one child with each weight-space operator at 7B scale.

Parents are random rank-32 LoRA adapters on all seven linear projections of every layer of
Qwen2.5-7B (hidden 3584, intermediate 18944, 28 query heads and 4 key/value heads of dim 128), in
float32 and bfloat16. Side by side in the same run it measures:

- the cheap SVD of a LoRA delta (QR of A^T and B, r x r core) against a dense SVD of ``B @ A``;
- how much of the exact mean delta ``(B1 A1 + B2 A2) / 2`` ``delta_merge`` keeps against
  ``linear_0_5`` (mean of A and of B), for independent parents, for a parent and its mutated
  child, and for one delta written in two gauges ``(B G, G^-1 A)``.
"""

from __future__ import annotations

import argparse
import os
import time

QWEN25_7B = {"hidden": 3584, "intermediate": 18944, "heads": 28, "kv_heads": 4, "head_dim": 128, "layers": 28}
FLOOR_S = 3.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layers", type=int, default=QWEN25_7B["layers"], help="decoder layers (default 28)")
    p.add_argument("--rank", type=int, default=32, help="LoRA rank (default 32)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per operator; the median is shown")
    p.add_argument("--dtypes", default="float32,bfloat16", help="parent dtypes (comma-separated)")
    p.add_argument("--operators", default="", help="only these operators (comma-separated; default all)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's own choice)")
    p.add_argument(
        "--dense-modules", default="k_proj",
        help="projections for the dense-SVD comparison (q_proj takes ~30 s on 2 cores); empty to skip",
    )


def module_shapes(layers: int) -> dict[str, tuple[int, int]]:
    """``{module path: (in, out)}`` for all seven linear projections of ``layers`` Qwen2.5-7B layers."""
    h, i = QWEN25_7B["hidden"], QWEN25_7B["intermediate"]
    kv = QWEN25_7B["kv_heads"] * QWEN25_7B["head_dim"]
    per_layer = {
        "self_attn.q_proj": (h, h), "self_attn.k_proj": (h, kv), "self_attn.v_proj": (h, kv),
        "self_attn.o_proj": (h, h), "mlp.gate_proj": (h, i), "mlp.up_proj": (h, i), "mlp.down_proj": (i, h),
    }
    return {f"model.layers.{n}.{m}": s for n in range(layers) for m, s in per_layer.items()}


def _parents(shapes, rank, dtype):
    from populora.policy.adapters import AdapterWeights

    return [
        AdapterWeights.init(shapes, rank, 2 * rank, b_init="random", b_std=0.02, seed=seed, dtype=dtype)
        for seed in (1, 2)
    ]


def _median_time(fn, repeats: int) -> tuple[float, float]:
    """Median wall-clock and median CPU (process) seconds of ``fn()`` over ``repeats`` runs."""
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return sorted(wall)[len(wall) // 2], sorted(cpu)[len(cpu) // 2]


def _rel_err(approx, exact) -> float:
    import torch

    return float(torch.linalg.matrix_norm(approx - exact) / torch.linalg.matrix_norm(exact))


def _timing_table(args, shapes, names) -> bool:
    """Print wall and CPU seconds per child; True when every operator's wall time is under the floor."""
    import torch

    from populora.population.operators import OPERATORS, make_child

    dtypes = [getattr(torch, d.strip()) for d in args.dtypes.split(",") if d.strip()]
    times = {}
    for dtype in dtypes:
        parents = _parents(shapes, args.rank, dtype)
        for name in names:
            spec = OPERATORS[name]
            make_child(spec.name, parents[: spec.parents], seed=0)  # warm-up (allocator, kernels)
            times[name, dtype] = _median_time(
                lambda spec=spec, parents=parents: make_child(spec.name, parents[: spec.parents], seed=0), args.repeats
            )
        del parents
    n_params = sum(args.rank * (i + o) for i, o in shapes.values())
    print(f"\none child, rank {args.rank}, {len(shapes)} modules ({n_params / 1e6:.1f} M parameters per adapter), "
          f"{torch.get_num_threads()} torch threads, median of {args.repeats}; wall = elapsed seconds, "
          "cpu = CPU seconds of this process")
    heads = " | ".join(f"{str(d).removeprefix('torch.')} wall | cpu" for d in dtypes)
    print(f"| operator | kind | {heads} | wall under {FLOOR_S:g} s |")
    print("|---|---|" + "---|---|" * len(dtypes) + "---|")
    ok = True
    for name in names:
        walls = [times[name, d][0] for d in dtypes]
        ok &= max(walls) < FLOOR_S
        cells = " | ".join(f"{times[name, d][0]:.2f} | {times[name, d][1]:.2f}" for d in dtypes)
        print(f"| {name} | {OPERATORS[name].kind} | {cells} | {'yes' if max(walls) < FLOOR_S else 'NO'} |")
    return ok


def _dense_vs_cheap_svd(args, shapes) -> None:
    import torch

    from populora.population.svd import lowrank_svd

    modules = [m.strip() for m in args.dense_modules.split(",") if m.strip()]
    if not modules:
        return
    print("\nSVD of one module's delta B @ A (float32): dense torch.linalg.svd vs cheap low-rank SVD")
    print("| module (out x in) | dense (s) | cheap (s) | speed-up | max rel. error of S | rel. error of U S V^T |")
    print("|---|---|---|---|---|---|")
    gen = torch.Generator().manual_seed(0)
    for proj in modules:
        path = next((p for p in shapes if p.endswith("." + proj)), None)
        if path is None:
            raise SystemExit(f"bench operators: --dense-modules: no module named {proj!r}")
        d_in, d_out = shapes[path]
        a = torch.randn(args.rank, d_in, generator=gen) / d_in**0.5
        b = torch.randn(d_out, args.rank, generator=gen) * 0.02
        t0 = time.perf_counter()
        dense = b @ a
        s_dense = torch.linalg.svd(dense, full_matrices=False).S[: args.rank]
        t_dense = time.perf_counter() - t0
        t_cheap = _median_time(lambda a=a, b=b: lowrank_svd(a, b), max(args.repeats, 3))[0]
        cheap = lowrank_svd(a, b)
        s_err = float(((cheap.s - s_dense).abs() / s_dense.max()).max())
        print(f"| {proj} ({d_out} x {d_in}) | {t_dense:.3f} | {t_cheap:.4f} | {t_dense / t_cheap:.0f}x | "
              f"{s_err:.1e} | {_rel_err(cheap.dense(), dense):.1e} |")


def _merge_quality(args, shapes) -> None:
    import torch

    from populora.policy.adapters import AdapterWeights
    from populora.population.operators import make_child

    layer0 = {m: s for m, s in shapes.items() if m.startswith("model.layers.0.self_attn.")}
    p1 = AdapterWeights.init(layer0, args.rank, 2 * args.rank, b_init="random", b_std=0.02, seed=11)
    gen = torch.Generator().manual_seed(5)

    def regauged(w):
        # Same deltas, other factors: B G and G^-1 A for a random well-conditioned G.
        def fn(m, a, b):
            g = torch.linalg.qr(torch.randn(w.rank, w.rank, generator=gen))[0] * torch.exp(
                torch.randn(w.rank, generator=gen)
            )
            return torch.linalg.solve(g, a), b @ g

        return w.map(fn)

    cases = {
        "independent parents": AdapterWeights.init(layer0, args.rank, 2 * args.rank, b_init="random", b_std=0.02, seed=12),
        "parent and its full_gaussian child": make_child("full_gaussian", [p1], seed=3, scale=0.3),
        "same deltas, other gauge": regauged(p1),
    }
    print(f"\nrelative Frobenius error against the exact mean delta (B1 A1 + B2 A2) / 2, rank {args.rank}, "
          f"modules {', '.join(m.rsplit('.', 1)[1] for m in layer0)} of layer 0 (lower is better)")
    print("| parents | delta_merge | linear_0_5 | ratio linear_0_5 / delta_merge |")
    print("|---|---|---|---|")
    for label, p2 in cases.items():
        children = {name: make_child(name, [p1, p2], seed=0) for name in ("delta_merge", "linear_0_5")}
        num = dict.fromkeys(children, 0.0)
        den = 0.0
        for m in layer0:
            exact = (p1.delta(m) + p2.delta(m)) / 2
            den += float(torch.linalg.matrix_norm(exact)) ** 2
            for name, child in children.items():
                num[name] += float(torch.linalg.matrix_norm(child.delta(m) - exact)) ** 2
        errs = {name: (num[name] / den) ** 0.5 for name in children}
        ratio = errs["linear_0_5"] / max(errs["delta_merge"], 1e-12)
        print(f"| {label} | {errs['delta_merge']:.3g} | {errs['linear_0_5']:.3g} | {ratio:.3g}x |")


def run(args: argparse.Namespace) -> int:
    import torch

    from populora.population.operators import OPERATORS

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    names = [n.strip() for n in args.operators.split(",") if n.strip()] or list(OPERATORS)
    unknown = [n for n in names if n not in OPERATORS]
    if unknown:
        print(f"bench operators: unknown operator {unknown[0]!r} (known: {', '.join(OPERATORS)})")
        return 2
    shapes = module_shapes(args.layers)
    device = "CPU" + ("" if not torch.cuda.is_available() else " (a GPU is present but not used)")
    print(f"populora bench operators: Qwen2.5-7B LoRA shapes, {args.layers} layers, rank {args.rank}, on {device} "
          f"({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start)")
    ok = _timing_table(args, shapes, names)
    _dense_vs_cheap_svd(args, shapes)
    _merge_quality(args, shapes)
    load = os.getloadavg()[0]
    print(f"\nload average at the end: {load:.1f} on {os.cpu_count()} cores")
    if not ok:
        note = " (the machine was shared: wall times include waiting for a core)" if load > (os.cpu_count() or 1) else ""
        print(f"FLOOR MISSED: some operator took {FLOOR_S:g} s or more of wall-clock time{note}")
    return 0 if ok else 1
