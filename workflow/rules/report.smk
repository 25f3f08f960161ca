rule matrix_fit:
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
        + " > {log} 2>&1"


rule summarize:
    input:
        get_all_metrics,
        get_all_histories,
        get_matrix_fits,
        get_all_selected,
    output:
        summary=f"{RESULTS}/summary.csv",
        history=f"{RESULTS}/history.csv",
        matrix=f"{RESULTS}/matrix.csv",
        headline=f"{RESULTS}/headline.csv",
    params:
        statistics=P["statistics"],
    log:
        f"{LOGS}/summarize.log",
    conda:
        ENV
    shell:
        cli("summarize") + " > {log} 2>&1"


rule bench:
    output:
        table=f"{RESULTS}/bench.csv",
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
        cli("bench", threads="{threads}") + " > {log} 2>&1"


rule report:
    input:
        summary=f"{RESULTS}/summary.csv",
        history=f"{RESULTS}/history.csv",
        matrix=f"{RESULTS}/matrix.csv",
        headline=f"{RESULTS}/headline.csv",
        bench=f"{RESULTS}/bench.csv",
        notebook="workflow/notebooks/report.ipynb",
    output:
        html=f"{RESULTS}/report.html",
        notebook=f"{RESULTS}/report.ipynb",
    log:
        f"{LOGS}/report.log",
    conda:
        ENV
    shell:
        cli("report") + " > {log} 2>&1"
