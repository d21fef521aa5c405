"""tfgshare: fine-grained GPU sharing and job scheduling for TF-Slim training jobs.

Importing this package never imports TensorFlow; only the job runner and
``slim_models`` do.
"""

__version__ = "0.1.0"
