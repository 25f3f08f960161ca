rule trial:
    input:
        get_prepared_dir,
        get_trial_hash_file,
    output:
        f"{RESULTS}/tuning/{{dataset}}/{{method}}/trial{{trial}}/train.json",
    params:
        run_hash=get_trial_hash,
    priority: get_train_priority
    log:
        f"{LOGS}/tuning/{{dataset}}/{{method}}/trial{{trial}}.log",
    conda:
        ENV
    threads: 1
    shell:
        cli("train", dataset="{wildcards.dataset}", method="{wildcards.method}", trial="{wildcards.trial}",
            threads="{threads}")
        + " > {log:q} 2>&1"


rule select:
    input:
        get_trials,
    output:
        f"{RESULTS}/tuning/{{dataset}}/{{method}}/selected.json",
    log:
        f"{LOGS}/tuning/{{dataset}}/{{method}}/select.log",
    conda:
        ENV
    shell:
        cli("select", dataset="{wildcards.dataset}", method="{wildcards.method}") + " > {log:q} 2>&1"


rule train:
    input:
        get_prepared_dir,
        get_selected,
        get_train_hash_file,
    output:
        model=model_output(f"{RESULTS}/runs/{{dataset}}/{{method}}/seed{{seed}}/model.pt"),
        history=report(f"{RESULTS}/runs/{{dataset}}/{{method}}/seed{{seed}}/history.csv", caption="../report/run.rst",
                       category="{dataset}", subcategory="{method}", labels={"seed": "{seed}", "file": "history"}),
        summary=f"{RESULTS}/runs/{{dataset}}/{{method}}/seed{{seed}}/train.json",
    params:
        run_hash=get_train_hash,
    priority: get_train_priority
    log:
        f"{LOGS}/train/{{dataset}}/{{method}}/seed{{seed}}.log",
    conda:
        ENV
    threads: get_train_threads
    shell:
        cli("train", dataset="{wildcards.dataset}", method="{wildcards.method}", seed="{wildcards.seed}",
            threads="{threads}")
        + " > {log:q} 2>&1"


rule finetune:
    input:
        get_prepared_dir,
        get_train_hash_file,
        model=f"{RESULTS}/runs/{{dataset}}/{{method}}/seed{{seed}}/model.pt",
    output:
        model=model_output(f"{RESULTS}/runs/{{dataset}}/{{method}}/seed{{seed}}/finetune/model.pt"),
        history=f"{RESULTS}/runs/{{dataset}}/{{method}}/seed{{seed}}/finetune/history.csv",
        summary=f"{RESULTS}/runs/{{dataset}}/{{method}}/seed{{seed}}/finetune/train.json",
    params:
        run_hash=get_train_hash,
    priority: get_train_priority
    log:
        f"{LOGS}/finetune/{{dataset}}/{{method}}/seed{{seed}}.log",
    conda:
        ENV
    threads: get_train_threads
    shell:
        cli("finetune", dataset="{wildcards.dataset}", method="{wildcards.method}", seed="{wildcards.seed}",
            threads="{threads}")
        + " > {log:q} 2>&1"


rule evaluate:
    input:
        get_prepared_dir,
        get_finetuned,
        get_evaluate_hash_file,
        model=f"{RESULTS}/runs/{{dataset}}/{{method}}/seed{{seed}}/model.pt",
        summary=f"{RESULTS}/runs/{{dataset}}/{{method}}/seed{{seed}}/train.json",
    output:
        report(f"{RESULTS}/runs/{{dataset}}/{{method}}/seed{{seed}}/metrics.json", caption="../report/run.rst",
               category="{dataset}", subcategory="{method}", labels={"seed": "{seed}", "file": "metrics"}),
    params:
        run_hash=get_run_hash,
    log:
        f"{LOGS}/evaluate/{{dataset}}/{{method}}/seed{{seed}}.log",
    conda:
        ENV
    threads: 1
    shell:
        cli("evaluate", dataset="{wildcards.dataset}", method="{wildcards.method}", seed="{wildcards.seed}",
            threads="{threads}")
        + " > {log:q} 2>&1"
