"""What a job submission must satisfy, one module per concern: each cleans what a form or an API
call sent into model values, or says per field what to fix. They write nothing; jobs.job_validate
reads the pools, tiers and quotas it checks against through the selectors."""
