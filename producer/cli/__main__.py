from producer.cli.main import main

main()
