"""The parameter shapes the benchmarks share (as optjit bench --shapes names them)."""


def shapes(preset, numel):
    if numel:
        return [[numel]]
    if preset == "gpt2-small":
        d, vocab, ctx = 768, 50257, 1024
        s = [[vocab, d], [ctx, d]]
        for _ in range(12):
            s += [[d], [d], [d, 3 * d], [3 * d], [d, d], [d], [d], [d], [d, 4 * d], [4 * d], [4 * d, d], [d]]
        return s + [[d], [d]]
    if preset == "many-small":
        return [[1000]] * 10000
    if preset == "resnet50":
        s = [[64, 3, 7, 7], [64], [64]]
        cin = 64
        for layer, blocks in enumerate([3, 4, 6, 3]):
            w = 64 << layer
            for b in range(blocks):
                s += [[w, cin, 1, 1], [w], [w], [w, w, 3, 3], [w], [w], [4 * w, w, 1, 1], [4 * w], [4 * w]]
                if b == 0:
                    s += [[4 * w, cin, 1, 1], [4 * w], [4 * w]]
                cin = 4 * w
        return s + [[1000, 2048], [1000]]
    raise SystemExit(f"unknown preset {preset}")
