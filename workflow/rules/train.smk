rule train:
    input:
        get_prepared_dir,
    output:
        model=f"{RESULTS}/runs/{{dataset}}/{{method}}/model.pt",
        history=f"{RESULTS}/runs/{{dataset}}/{{method}}/history.csv",
        summary=f"{RESULTS}/runs/{{dataset}}/{{method}}/train.json",
    params:
        run_hash=get_run_hash,
    log:
        f"{LOGS}/train/{{dataset}}/{{method}}.log",
    conda:
        ENV
    threads: 1
    shell:
        cli("train", dataset="{wildcards.dataset}", method="{wildcards.method}", threads="{threads}")
        + " > {log} 2>&1"


rule evaluate:
    input:
        get_prepared_dir,
        model=f"{RESULTS}/runs/{{dataset}}/{{method}}/model.pt",
        summary=f"{RESULTS}/runs/{{dataset}}/{{method}}/train.json",
    output:
        f"{RESULTS}/runs/{{dataset}}/{{method}}/metrics.json",
    params:
        run_hash=get_run_hash,
    log:
        f"{LOGS}/evaluate/{{dataset}}/{{method}}.log",
    conda:
        ENV
    threads: 1
    shell:
        cli("evaluate", dataset="{wildcards.dataset}", method="{wildcards.method}", threads="{threads}")
        + " > {log} 2>&1"
