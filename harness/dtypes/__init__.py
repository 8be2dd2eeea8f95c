"""Dtypes evo keeps as their bits: bf16 (`bf16.py`) and fp8 e4m3/e5m2 (`fp8.py`) live in
uint16/uint8 buffers; `encodings.py` is the one owner of which dtypes those are and how a
value is read from its bits."""
