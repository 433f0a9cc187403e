"""verl fixes: what every run needs changed in verl 0.9.1 on any accelerator, imported by verl in each process of a run (VERL_USE_EXTERNAL_MODULES).
May import: nothing of src (verl imports `register` by name in every process; the node and trainer packages read its variables' names).
"""

# what VERL_USE_EXTERNAL_MODULES names (src/node/environment.py run_env); importing it applies the fixes
REGISTER_MODULE = "src.verl_fixes.register"
