"""What the reward guards catch on the hack set, what they flag of its clean answers, and what they
cost per response (issue 24); and the language-ID comparison the wrong-language guard was picked by.

    .venv/bin/python benches/guards.py            per kind x guard: caught (hacked kinds) and flagged
                                                  (clean kinds); the length-coverage bounds swept;
                                                  microseconds per response, per guard
    .venv/bin/python benches/guards.py --lid      language ID on short zh/ja/en/de/fr segments
                                                  (tests/fixtures/hack_set_lid.tsv): accuracy and
                                                  microseconds per segment of every identifier
                                                  installed (pycld2, cld3-py, py3langid, lingua)

Every guard is computed here whatever the yaml switches, with the thresholds of
conf/reward_base/default.yaml; the row `on` says which are on by default. The hack set is
tests/fixtures/hack_set.py (both directions zh<->en). Results: benches/RESULTS.md, "Reward guards".
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LID_SET = REPO / "tests" / "fixtures" / "hack_set_lid.tsv"


def default_guard_config() -> dict:
    """reward.guards of conf/reward_base/default.yaml, as the launcher passes it."""
    import yaml

    return yaml.safe_load((REPO / "conf" / "reward_base" / "default.yaml").read_text())["guards"]


def guard_settings(config: dict, all_on: bool):
    from src.rewards.guards import read_guards

    if all_on:
        config = {name: {**sub, "enable": True} for name, sub in config.items()}
    return read_guards(config)


def evaluate(rows: list[dict], settings) -> dict[str, Counter]:
    """kind -> Counter(n=rows, <guard>=rows it fired on, any=rows any guard fired on)."""
    from src.data.terms import parse_terms
    from src.rewards.guards import check

    out: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        src, tgt = r["lang_pair"].split("-")
        fired = check(r["hyp"], r["src"], r["ref"], src, tgt, settings, parse_terms(r.get("terms"), src, tgt)).fired()
        out[r["kind"]]["n"] += 1
        out[r["kind"]]["any"] += bool(fired)
        for name in fired:
            out[r["kind"]][name] += 1
    return out


def guard_table(rows: list[dict], config: dict) -> str:
    from src.rewards.guards import NAMES
    from tests.fixtures.hack_set import CLEAN_KINDS, HACK_KINDS

    stats = evaluate(rows, guard_settings(config, all_on=True))
    on = {name for name in NAMES if config[name]["enable"]}
    head = "| kind | n | " + " | ".join(NAMES) + " | any guard on by default |"
    lines = [head, "|" + "---|" * (len(NAMES) + 3)]
    for kind in list(HACK_KINDS) + list(CLEAN_KINDS):
        c = stats[kind]
        cells = []
        for name in NAMES:
            mark = "**" if HACK_KINDS.get(kind) == name else ""
            cells.append(f"{mark}{c[name]}/{c['n']}{mark}")
        label = kind if kind in HACK_KINDS else f"{kind} (clean)"
        lines.append(f"| {label} | {c['n']} | " + " | ".join(cells) + f" | {_any_on(rows, kind, on, config)} |")
    lines.append("| on by default | | " + " | ".join("yes" if n in on else "no" for n in NAMES) + " | |")
    return "\n".join(lines)


def _any_on(rows: list[dict], kind: str, on: set[str], config: dict) -> str:
    from src.rewards.guards import check

    s = guard_settings(config, all_on=False)
    picked = [r for r in rows if r["kind"] == kind]
    hit = sum(bool(check(r["hyp"], r["src"], r["ref"], *r["lang_pair"].split("-"), s).fired()) for r in picked)
    return f"{hit}/{len(picked)}"


def length_sweep(rows: list[dict], config: dict) -> str:
    from src.rewards.guards import coverage_ratio
    from tests.fixtures.hack_set import CLEAN_KINDS

    ratios = defaultdict(list)
    for r in rows:
        src, tgt = r["lang_pair"].split("-")
        for with_ref in (True, False):
            ratio = coverage_ratio(r["hyp"], r["src"], r["ref"] if with_ref else "", src, tgt)
            ratios[(r["kind"], with_ref)].append(ratio)
    lines = ["| length_coverage bounds | reference | under_translation caught | repetition caught | clean flagged "
             "| clean ratio range |", "|---|---|---|---|---|---|"]
    for lo, hi in ((0.5, 2.0), (0.6, 1.8), (0.7, 1.6)):
        for with_ref in (True, False):
            under = ratios[("under_translation", with_ref)]
            rep = ratios[("repetition", with_ref)]
            clean = [x for k in CLEAN_KINDS for x in ratios[(k, with_ref)] if x is not None]
            flagged = sum(not lo <= x <= hi for x in clean)
            lines.append(f"| [{lo}, {hi}] | {'yes' if with_ref else 'no (source x pair ratio)'} | "
                         f"{sum(x < lo for x in under)}/{len(under)} | {sum(x > hi for x in rep)}/{len(rep)} | "
                         f"{flagged}/{len(clean)} | {min(clean):.2f} to {max(clean):.2f} |")
    return "\n".join(lines)


def cost_table(rows: list[dict], config: dict, repeats: int) -> str:
    from src.rewards import guards as g
    from src.rewards import lid
    from dataclasses import replace

    from src.rewards.guards import GuardSettings

    full = guard_settings(config, all_on=True)
    off = {name: getattr(full, name) for name in g.NAMES}
    lid.identifier.cache_clear()
    lid.restricted.cache_clear()
    t0 = time.perf_counter()  # the model load, once per reward worker
    lid.restricted(full.wrong_language.languages)
    load_s = time.perf_counter() - t0
    lines = ["| guard | us per response (mean over the hack set) |", "|---|---|"]
    total = 0.0
    for name in g.NAMES:
        only = GuardSettings({n: (s if n == name else replace(s, enable=False)) for n, s in off.items()})
        t0 = time.perf_counter()
        for _ in range(repeats):
            for r in rows:
                src, tgt = r["lang_pair"].split("-")
                g.check(r["hyp"], r["src"], r["ref"], src, tgt, only)
        us = (time.perf_counter() - t0) / (repeats * len(rows)) * 1e6
        total += us
        lines.append(f"| {name} | {us:.0f} |")
    lines.append(f"| every guard (sum) | {total:.0f} |")
    lines.append(f"\nlanguage-ID model load (once per reward worker): {load_s:.2f} s")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# language-ID comparison
# ----------------------------------------------------------------------------------------------
def _identifiers() -> dict:
    """name -> (load seconds, text -> ISO 639-1 code or 'un'); those not installed are skipped."""
    out = {}

    def timed(name, build):
        try:
            t0 = time.perf_counter()
            fn = build()
            out[name] = (time.perf_counter() - t0, fn)
        except ImportError:
            print(f"({name} not installed: skipped)")

    def cld2():
        import pycld2

        return lambda t: pycld2.detect(t)[2][0][1]

    def cld3():
        import gcld3

        ident = gcld3.NNetLanguageIdentifier(min_num_bytes=0, max_num_bytes=1000)
        return lambda t: ident.FindLanguage(text=t).language

    def langid():
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        return lambda t: ident.classify(t)[0]

    def lingua(low: bool):
        def build():
            from lingua import LanguageDetectorBuilder

            b = LanguageDetectorBuilder.from_all_languages().with_preloaded_language_models()
            det = (b.with_low_accuracy_mode() if low else b).build()

            def detect(t):
                got = det.detect_language_of(t)
                return got.iso_code_639_1.name.lower() if got else "un"
            return detect
        return build

    timed("pycld2", cld2)
    timed("cld3-py", cld3)
    timed("py3langid", langid)
    timed("lingua", lingua(False))
    timed("lingua (low accuracy mode)", lingua(True))
    return out


def lid_table(repeats: int) -> str:
    rows = [line.rstrip("\n").split("\t", 1) for line in LID_SET.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]
    langs = list(dict.fromkeys(lang for lang, _ in rows))
    lines = ["| identifier (all its languages) | accuracy | " + " | ".join(langs)
             + " | no answer | us per segment | load s |", "|" + "---|" * (len(langs) + 5)]
    for name, (load_s, fn) in _identifiers().items():
        fn("warm up")
        right, unknown = Counter(), 0
        t0 = time.perf_counter()
        for _ in range(repeats):
            for lang, text in rows:
                got = (fn(text) or "un").lower().split("-")[0]
                right[lang] += got == lang
                unknown += got in ("un", "und")
        us = (time.perf_counter() - t0) / (repeats * len(rows)) * 1e6
        per = [f"{right[lang] // repeats}/{sum(1 for x, _ in rows if x == lang)}" for lang in langs]
        total = sum(right.values()) // repeats
        lines.append(f"| {name} | {total}/{len(rows)} ({total / len(rows):.1%}) | " + " | ".join(per)
                     + f" | {unknown // repeats} | {us:.0f} | {load_s:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lid", action="store_true", help="compare the language identifiers installed")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.lid:
        print(lid_table(args.repeats))
        return
    from tests.fixtures.hack_set import rows as hack_rows

    rows = hack_rows()
    config = default_guard_config()
    print(f"hack set: {len(rows)} rows (tests/fixtures/hack_set.py); bold = the guard meant for the kind\n")
    print(guard_table(rows, config))
    print()
    print(length_sweep(rows, config))
    print()
    print(cost_table(rows, config, args.repeats))


if __name__ == "__main__":
    main()
