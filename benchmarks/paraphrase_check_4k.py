"""A small paraphrase sanity check beside the long chats: 16 paraphrases on a 4,000-message demo home.

Targets: 20 messages drawn with ``random.Random(29)`` from the home's unique 50-200 character
messages with 6+ words of 4+ letters; 16 of them got a one-sentence paraphrase sharing at most
one content word (written by the issue 29 session after seeing the targets, not by a blind
writer). It is NOT held out: it was used once to reject a coverage variant (README, Search).
Found = the target's text inside a top-5 passage.

    brb demo --messages 4000 --home /tmp/demo4k --no-encryption
    PYTHONPATH=. .venv/bin/python benchmarks/paraphrase_check_4k.py /tmp/demo4k
"""
import sys
from brb_pipeline.core.search.fusion import Fusion
from brb_pipeline.pipeline.query import Searcher
from brb_pipeline.settings import Settings
import brb_pipeline.pipeline  # noqa: F401

Q = [
 ("Warrior Cat, I bed those shoes would be honored", "Who told me my online nickname was a tribute to some footwear?"),
 ("I don't have a particular favorite. But I enjoy math and spanish", "Who said they have no top pick among subjects but like numbers and languages?"),
 ("Haha the detail part is fun:) I'm guessing you like to draw eyes?", "Someone guessed that I enjoy sketching pupils and lashes"),
 ("It has to be super covert, or even better super nonchalant", "Planning a secret surprise so she wouldn't catch on"),
 ("Niice most of my family lives in Utah. I live in Florida!", "Who mentioned relatives out west in the Salt Lake state while staying in the sunshine state?"),
 ("I would never count robots or computers as living.", "Conversation about whether machines deserve rights or count as alive"),
 ("I used to read a lot about Greek and Roman mythology when I was a kid.", "Who was into ancient myths of Athens and Rome as a child?"),
 ("All of the actors are really fun to watch in late night interviews", "The cast is entertaining on talk shows after dark"),
 ("It is mind boggling to think of what is next to come, because it will keep progressing", "Amazing to imagine what the future holds as technology keeps advancing"),
 ("When you ride the shuttle inside the park sit on the left side", "Tip about which seat to take on the theme park tram up and down"),
 ("yeah then instead of visiting germany we could visit really cool planets", "Instead of a trip to Europe we could explore other worlds by rocket"),
 ("and on top of that, there's socializing and experiences vs getting a good education", "Weighing parties and life experience against schooling"),
 ("I think the transitions smooth themselves out the more you invite change", "Welcoming new things makes shifts feel less rough"),
 ("Haha yep. That is so true. I have a sketchbook full of hands", "Filling a whole drawing pad with fingers because they're tough to get right"),
 ("yeah if you can go back in time or ffw that would win most of the time", "Debate over superpowers: time travel versus predicting what's ahead"),
 ("I would have agree with the plea for happier dreams, Warrior Cat.", "Agreeing with the wish for nicer nighttime visions"),
]
sq = lambda s: " ".join(s.split())
s = Settings.load(sys.argv[1])
with Searcher.open(s) as se:
    systems = {"vector": dict(mode="vector"), "lexical": dict(mode="lexical"),
               "hybrid before (fixed 0.05 / 0.7)": dict(mode="hybrid", fusion=Fusion(covered_lexical_weight=None)),
               "hybrid now (coverage)": dict(mode="hybrid"),
               "cov 0.25 w0.5": dict(mode="hybrid", fusion=Fusion(coverage_from=0.25, coverage_full=0.25)),
               "cov 0.3 w0.5": dict(mode="hybrid", fusion=Fusion(coverage_from=0.3, coverage_full=0.3))}
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
