rule trial:
    input:
        get_prepared_dir,
        get_trial_hash_file,
        get_promoted_from,
    output:
        str(TRIAL / paths.TRAIN_RECORD),
    params:
        run_hash=get_trial_hash,
    priority: get_train_priority
    resources:
        gpu=get_train_gpus,
        runtime=get_train_runtime,
        mem_mb=get_mem_mb,
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
        str(TUNING_DIR / paths.SELECTED),
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
        model=model_output(str(RUN / paths.MODEL)),
        history=report(str(RUN / paths.HISTORY), caption="../report/run.rst",
                       category="{dataset}", subcategory="{method}", labels={"seed": "{seed}", "file": "history"}),
        summary=str(RUN / paths.TRAIN_RECORD),
    params:
        run_hash=get_train_hash,
    priority: get_train_priority
    resources:
        gpu=get_train_gpus,
        runtime=get_train_runtime,
        mem_mb=get_mem_mb,
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
        model=str(RUN / paths.MODEL),
    output:
        model=model_output(str(FINETUNE / paths.MODEL)),
        history=str(FINETUNE / paths.HISTORY),
        summary=str(FINETUNE / paths.TRAIN_RECORD),
    params:
        run_hash=get_train_hash,
    priority: get_train_priority
    resources:
        gpu=get_gpus,
        runtime=get_train_runtime,
        mem_mb=get_mem_mb,
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
        model=str(RUN / paths.MODEL),
        summary=str(RUN / paths.TRAIN_RECORD),
    output:
        report(str(RUN / paths.METRICS), caption="../report/run.rst",
               category="{dataset}", subcategory="{method}", labels={"seed": "{seed}", "file": "metrics"}),
    params:
        run_hash=get_run_hash,
    resources:
        gpu=get_gpus,
        runtime=get_evaluate_runtime,
        mem_mb=get_mem_mb,
    log:
        f"{LOGS}/evaluate/{{dataset}}/{{method}}/seed{{seed}}.log",
    conda:
        ENV
    threads: 1
    shell:
        cli("evaluate", dataset="{wildcards.dataset}", method="{wildcards.method}", seed="{wildcards.seed}",
            threads="{threads}")
        + " > {log:q} 2>&1"
