localrules:
    fetch,  # runs on the submitting host under a cluster executor (compute nodes are often offline)


rule fetch:
    input:
        get_local_corpus,
        get_data_hash_file,
    output:
        directory(str(RAW)),
    params:
        data_hash=get_data_hash,
    log:
        f"{LOGS}/fetch/{{dataset}}.log",
    conda:
        ENV
    shell:
        cli("fetch", dataset="{wildcards.dataset}") + " > {log:q} 2>&1"


rule prepare:
    input:
        get_raw_dir,
        get_data_hash_file,
    output:
        directory(str(PREPARED)),
    params:
        data_hash=get_data_hash,
    log:
        f"{LOGS}/prepare/{{dataset}}.log",
    conda:
        ENV
    shell:
        cli("prepare", dataset="{wildcards.dataset}") + " > {log:q} 2>&1"
