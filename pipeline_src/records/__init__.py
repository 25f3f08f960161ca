"""The pipeline's bookkeeping: the small hash files that tell Snakemake and DVC which steps are current, and
stash / restore of a run's records between a results folder and a publication."""
