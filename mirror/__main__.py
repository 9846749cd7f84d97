from mirror.cli import main

raise SystemExit(main())
