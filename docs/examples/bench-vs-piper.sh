# In the zsynth checkout, on a box where nothing else runs (about 5 minutes on 2 cores; --reduced: about 1 minute).
.venv/bin/python scripts/bench_vs_piper.py --json side-by-side.json
