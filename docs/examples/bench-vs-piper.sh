# In the zsynth checkout, on a box where nothing else runs (about 9 minutes on 2 cores; --reduced: 2 to 3 minutes).
.venv/bin/python -m harness.bench vs-piper --json side-by-side.json
