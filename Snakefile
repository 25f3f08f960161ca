# LM output-layer benchmark: the table of contents.
# Every step is `python -m pipeline_src <step>`; DVC's dvc.yaml calls the same CLI.
# Config: params.yaml (or `--config params=FILE`), validated before any job starts.

report: "workflow/report/workflow.rst"  # `snakemake --report report.html`: results, captions, code, params


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/references.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        get_final_outputs(),
    default_target: True


onsuccess:
    # with DVC beside it, record what Snakemake made (pipeline_src/records/hashes.py: dvc_record)
    message = dvc_record(PARAMS_FILE)
    if message:
        print(message)
