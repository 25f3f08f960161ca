rule matrix_fit:
    input:
        f"{HASHES}/matrix",
    output:
        f"{RESULTS}/matrix/M{{vocab}}-d{{dim}}-seed{{seed}}.json",
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
    output:
        summary=report(f"{RESULTS}/summary.csv", caption="../report/summary.rst", category="Results tables",
                       labels={"table": "every run and split"}),
        history=f"{RESULTS}/history.csv",
        anytime=f"{RESULTS}/anytime.csv",
        matrix=f"{RESULTS}/matrix.csv",
        headline=report(f"{RESULTS}/headline.csv", caption="../report/headline.rst", category="Results tables",
                        labels={"table": "headline per dataset and method"}),
        contrasts=report(f"{RESULTS}/contrasts.csv", caption="../report/contrasts.rst", category="Results tables",
                         labels={"table": "each method against its own control"}),
        references=f"{RESULTS}/references.csv",
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
        summary=f"{RESULTS}/summary.csv",
        history=f"{RESULTS}/history.csv",
        anytime=f"{RESULTS}/anytime.csv",  # a budgeted dataset's learning curve is its anytime curve
        headline=f"{RESULTS}/headline.csv",
    output:
        forest=report(f"{RESULTS}/figures/{{dataset}}/forest.svg", caption="../report/forest.rst",
                      category="{dataset}", subcategory="headline figures", labels={"figure": "forest plot of Δ nll"}),
        pareto=report(f"{RESULTS}/figures/{{dataset}}/pareto.svg", caption="../report/pareto.rst",
                      category="{dataset}", subcategory="headline figures", labels={"figure": "quality against cost"}),
        curves=report(f"{RESULTS}/figures/{{dataset}}/curves.svg", caption="../report/curves.rst",
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
        table=report(f"{RESULTS}/bench.csv", caption="../report/bench.rst", category="Speed and memory",
                     labels={"table": "bench: heads against the matmul floor"}),
        meta=f"{RESULTS}/bench.json",
    params:
        bench=P["bench"],
        methods=[P["methods"][m] for m in P["bench"]["methods"]],
    log:
        f"{LOGS}/bench.log",
    conda:
        ENV
    threads: 1
    shell:
        cli("bench", threads="{threads}") + " > {log:q} 2>&1"


rule report:
    input:
        summary=f"{RESULTS}/summary.csv",
        history=f"{RESULTS}/history.csv",
        anytime=f"{RESULTS}/anytime.csv",
        matrix=f"{RESULTS}/matrix.csv",
        headline=f"{RESULTS}/headline.csv",
        contrasts=f"{RESULTS}/contrasts.csv",
        references=f"{RESULTS}/references.csv",
        bench=f"{RESULTS}/bench.csv",
        notebook="workflow/notebooks/report.ipynb",
    output:
        html=report(f"{RESULTS}/report.html", caption="../report/report.rst", category="Report",
                    labels={"page": "benchmark report (papermill)"}),
        notebook=f"{RESULTS}/report.ipynb",
    log:
        f"{LOGS}/report.log",
    conda:
        ENV
    shell:
        cli("report") + " > {log:q} 2>&1"
