"""A small paraphrase sanity check beside the long chats: 16 paraphrases on a 4,000-message demo home.

Targets: 20 messages drawn with ``random.Random(29)`` from the home's unique 50-200 character
messages with 6+ words of 4+ letters; 16 of them got a one-sentence paraphrase sharing at most
one content word (written by the issue 29 session after seeing the targets, not by a blind
writer). It is NOT held out: it was used once to reject a coverage variant (docs/search.md).
Found = the target's text inside a top-5 passage.

    brb demo --messages 4000 --home /tmp/demo4k --no-encryption
    PYTHONPATH=. .venv/bin/python benchmarks/paraphrase_check_4k.py /tmp/demo4k
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from brb_pipeline.core.search.fusion import Fusion
from brb_pipeline.search.query import Searcher
from brb_pipeline.config.settings import Settings
from brb_pipeline import keys as _keys
_keys.install()  # an encrypted home's files open with its key

from paraphrase_check_4k_q import Q  # noqa: E402

sq = lambda s: " ".join(s.split())
s = Settings.load(sys.argv[1])
with Searcher.open(s) as se:
    systems = {"vector": dict(mode="vector"), "lexical": dict(mode="lexical"),
               "hybrid before (fixed 0.05 / 0.7)": dict(mode="hybrid", fusion=Fusion(covered_lexical_weight=None, disagreement_depth=None)),
               "hybrid first pass (coverage, no both-bests rule)": dict(mode="hybrid", fusion=Fusion(disagreement_depth=None)),
               "hybrid now (coverage + both bests first)": dict(mode="hybrid"),
               "cov 0.25 w0.5": dict(mode="hybrid", fusion=Fusion(coverage_from=0.25, coverage_full=0.25, disagreement_depth=None)),
               "cov 0.3 w0.5": dict(mode="hybrid", fusion=Fusion(coverage_from=0.3, coverage_full=0.3, disagreement_depth=None))}
    covs = [se.search(q, mode="lexical", k=5, log=False)["lexical_coverage"] for _, q in Q]
    print("coverage per question:", [round(c or 0, 2) for c in covs], "above 0.5:", sum((c or 0) > 0.5 for c in covs))
    for name, opts in systems.items():
        h5 = mrr = 0
        for target, q in Q:
            hits = se.search(q, k=10, log=False, **opts)["hits"]
            r = next((i for i, h in enumerate(hits, 1) if sq(target) in sq(h["text"] or "")), None)
            h5 += r is not None and r <= 5
            mrr += 1 / r if r else 0
        print(f"{name}: hit@5 {h5}/{len(Q)}  MRR@10 {mrr / len(Q):.3f}")
