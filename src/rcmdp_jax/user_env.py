"""Not a module any more: a user's environment on the command line lives in
``rcmdp_jax.study.user_code``. Importing this path says so in one line."""

raise ImportError("rcmdp_jax.user_env moved: import rcmdp_jax.study.user_code (one import path per name)")
