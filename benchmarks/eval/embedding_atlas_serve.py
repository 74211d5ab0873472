"""Serve a 64K synthetic dataset with embedding-atlas 0.26 (eval only, scratch venv)."""
import sys, numpy as np, pandas as pd, uvicorn
from pathlib import Path
from embedding_atlas.data_source import DataSource
from embedding_atlas.options import make_embedding_atlas_props
from embedding_atlas.server import make_server
n = int(sys.argv[2]); rng = np.random.default_rng(7)
cl = rng.integers(0, 40, n); c = rng.uniform(-20, 20, (40, 2)); xy = c[cl] + rng.normal(0, .8, (n, 2))
W = "ferry harbour dinner tickets rent landlord exam thesis hike trail recipe oven guitar concert visa".split()
df = pd.DataFrame({"id": np.arange(n), "x": xy[:, 0], "y": xy[:, 1],
                   "text": [" ".join(rng.choice(W, 14)) for _ in range(n)],
                   "contact": [f"Person {i:03d}" for i in rng.integers(0, 300, n)],
                   "date": pd.Timestamp("2021-01-01") + pd.to_timedelta(rng.integers(0, 1460, n), unit="D")})
props = make_embedding_atlas_props(row_id="id", x="x", y="y", text="text")
meta = {"props": props}
ds = DataSource("eval", df, meta)
import embedding_atlas
app = make_server(ds, static_path=str(Path(embedding_atlas.__file__).parent / "static"))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
