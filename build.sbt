// JVM side of gradspark: native gradient kernels (see scala/README.md).
// sbt users: `sbt package` builds target/scala-2.13/gradspark-kernels_2.13-0.1.0.jar.
// Spark is "provided": the jar runs inside a Spark 4.x driver/executors.
ThisBuild / organization := "io.gradspark"
ThisBuild / version := "0.1.0"
ThisBuild / scalaVersion := "2.13.18"

lazy val root = (project in file("."))
  .settings(
    name := "gradspark-kernels",
    Compile / scalaSource := baseDirectory.value / "scala" / "src" / "main" / "scala",
    Test / scalaSource := baseDirectory.value / "scala" / "src" / "test" / "scala",
    libraryDependencies ++= Seq(
      "org.apache.spark" %% "spark-core" % "4.3.0" % Provided,
      "org.apache.spark" %% "spark-mllib" % "4.3.0" % Provided
    ),
    javacOptions ++= Seq("--release", "17"),
    scalacOptions ++= Seq("-release", "17", "-deprecation", "-feature")
  )
