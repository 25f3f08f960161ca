rule matrix_fit:
    input:
        f"{HASHES}/matrix",
    output:
        OUT["matrix_fit"],
    params:
        matrix=P["matrix"],
        methods=[P["methods"][m] for m in P["matrix"]["methods"]],
        seed=P["seed"],
    log:
        f"{LOGS}/matrix/M{{vocab}}-d{{dim}}-seed{{seed}}.log",
    conda:
        ENV
    threads: 1
    shell:
        cli("matrix", vocab="{wildcards.vocab}", dim="{wildcards.dim}", seed="{wildcards.seed}", threads="{threads}")
        + " > {log:q} 2>&1"


rule summarize:
    input:
        f"{HASHES}/{SUMMARY_SENTINEL}",  # newer than summary.csv after a `summarize --partial` by hand
        f"{HASHES}/statistics",
        get_all_metrics,
        get_all_histories,
        get_matrix_fits,
        get_all_selected,
        get_all_references,
        get_gpu_cells,
    output:
        summary=report(OUT["summary"], caption="../report/summary.rst", category="Results tables",
                       labels={"table": "every run and split"}),
        history=OUT["history"],
        anytime=OUT["anytime"],
        matrix=OUT["matrix"],
        headline=report(OUT["headline"], caption="../report/headline.rst", category="Results tables",
                        labels={"table": "headline per dataset and method"}),
        contrasts=report(OUT["contrasts"], caption="../report/contrasts.rst", category="Results tables",
                         labels={"table": "each method against its own control"}),
        references=OUT["references"],
        headline_metrics=directory(OUT["headline_metrics"]),  # DVC's compact metrics (a file a dataset and method), its curves
        valid_curves=OUT["valid_curves"],
        summary_json=OUT["summary_json"],  # the tables' digests and the runs they hold
        **({"tuning": OUT["tuning"], "tuning_curves": OUT["tuning_curves"]} if TUNING["enabled"] else {}),
    params:
        statistics=P["statistics"],
    log:
        f"{LOGS}/summarize.log",
    conda:
        ENV
    shell:
        cli("summarize") + " > {log:q} 2>&1"


rule figures:
    input:
        f"{HASHES}/statistics",
        summary=OUT["summary"],
        history=OUT["history"],
        anytime=OUT["anytime"],  # a budgeted dataset's learning curve is its anytime curve
        headline=OUT["headline"],
    output:
        forest=report(OUT["figure_forest"], caption="../report/forest.rst",
                      category="{dataset}", subcategory="headline figures", labels={"figure": "forest plot of Δ nll"}),
        pareto=report(OUT["figure_pareto"], caption="../report/pareto.rst",
                      category="{dataset}", subcategory="headline figures", labels={"figure": "quality against cost"}),
        curves=report(OUT["figure_curves"], caption="../report/curves.rst",
                      category="{dataset}", subcategory="headline figures", labels={"figure": "learning curves"}),
    params:
        statistics=P["statistics"],
    log:
        f"{LOGS}/figures/{{dataset}}.log",
    conda:
        ENV
    shell:
        cli("figures", dataset="{wildcards.dataset}") + " > {log:q} 2>&1"


rule bench:
    input:
        f"{HASHES}/bench",
    output:
        table=report(OUT["bench"], caption="../report/bench.rst", category="Speed and memory",
                     labels={"table": "bench: heads against the matmul floor"}),
        meta=OUT["bench_json"],
    params:
        bench=P["bench"],
        methods=[P["methods"][m] for m in P["bench"]["methods"]],
    resources:
        gpu=get_gpus,
    log:
        f"{LOGS}/bench.log",
    conda:
        ENV
    threads: 1
    shell:
        cli("bench", threads="{threads}") + " > {log:q} 2>&1"


rule report:
    input:
        summary=OUT["summary"],
        history=OUT["history"],
        anytime=OUT["anytime"],
        matrix=OUT["matrix"],
        headline=OUT["headline"],
        contrasts=OUT["contrasts"],
        references=OUT["references"],
        bench=OUT["bench"],
        notebook="workflow/notebooks/report.ipynb",
    output:
        html=report(OUT["report"], caption="../report/report.rst", category="Report",
                    labels={"page": "benchmark report (papermill)"}),
        notebook=OUT["report_notebook"],
    log:
        f"{LOGS}/report.log",
    conda:
        ENV
    shell:
        cli("report") + " > {log:q} 2>&1"
