rule reference:
    input:
        get_prepared_dir,
        get_reference_hash_file,
    output:
        OUT["reference"],
    log:
        f"{LOGS}/references/{{dataset}}/{{name}}.log",
    conda:
        ENV
    threads: 1
    shell:
        cli("reference", dataset="{wildcards.dataset}", name="{wildcards.name}") + " > {log:q} 2>&1"
