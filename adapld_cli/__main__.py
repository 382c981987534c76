"""``python -m adapld_cli``: the same as the ``adapld`` console script."""

from adapld_cli.cli.app import main

if __name__ == "__main__":
    main()
