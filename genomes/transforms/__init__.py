"""One module per PTX transform; see genomes.transforms.registry."""
