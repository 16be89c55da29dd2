print(submitit.helpers.CommandFunction(["which"])("pip"))  # will run  "which pip"
