"""The model round trip: a ``torch.compile``d program's Triton kernels captured as specs
(``evo.model.capture``), evolved by ``evo run``, put back and verified end to end."""
