"""Records to answers: the summary and its statistics, verdicts and findings, the sweep's per-size tables,
figures, the HTML report and the publication (with its Markdown tables)."""
