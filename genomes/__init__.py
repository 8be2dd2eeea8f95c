"""genomes package."""
