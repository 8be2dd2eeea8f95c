"""evo.checkpoint: the run's checkpoint file as one owner writes it."""

from __future__ import annotations


def test_a_checkpoint_written_from_kernels_encoded_entries_is_json_dumps_byte_for_byte():
    """evo.checkpoint.dumps: kernels' entries taken as the JSON text their last save
    encoded give the same bytes as encoding the whole checkpoint (what a resume reads)."""
    import json

    from evo import checkpoint

    data = {"version": 3, "config_hash": "ab", "backend": "gpu on “H200”", "llm": {"calls": 2},
            "kernels": {"b": {"known": {"[]": {"cycles": 1.5e-07, "valid": True}}, "evals": 4},
                        "a\u00e9": {"state": [1, 2.25, None], "rng": [3, [1, 2], None]}},
            "priors": {"b": {"genes": {"vec_ld": 0.125}}}, "seconds": {}, "reduced": {"a\u00e9": {}}}
    encoded = {(section, kernel): json.dumps(entry, sort_keys=True)
               for section in checkpoint.PER_KERNEL for kernel, entry in data.get(section, {}).items()}
    assert checkpoint.dumps(data, encoded) == json.dumps(data, sort_keys=True)
    del encoded[("kernels", "b")]  # an entry no save encoded yet is encoded here
    assert checkpoint.dumps(data, encoded) == json.dumps(data, sort_keys=True)
    stale = {("kernels", "b"): json.dumps({"evals": 9})}  # what the file holds is the text
    assert json.loads(checkpoint.dumps(data, stale))["kernels"]["b"] == {"evals": 9}
